"""The evaluated policy and its tokenizer, opened inside the event loop and closed after.

`PolicySpec` names one of three sources:
  sglang   `url`: an SGLang server (or router) — `/generate` with token ids and log-probs;
  openai   `url` + `model`: an OpenAI-compatible `/v1/completions` endpoint (text answers,
           encoded again: `clients.openai_compat`);
  local    `path`: an HF folder (a local main-job checkpoint, a converted slime checkpoint or a
           base model) run in-process by the local backend on `device` (cpu, cuda).
The tokenizer is `tokenizer` when given, else the model folder's (`path`); the URL sources need
one of them. `check_exists` refuses a missing model or tokenizer folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evolving_rl.clients.openai_compat import OpenAICompletionsClient
from evolving_rl.clients.policy import PolicyClient, SGLangPolicyClient
from evolving_rl.clients.tokenizer import ChatTokenizer, HFChatTokenizer
from evolving_rl.config.schema import Config
from evolving_rl.local.checkpoints import incomplete_reason


@dataclass(frozen=True)
class PolicySpec:
    """Where the evaluated policy comes from (module docstring)."""

    kind: Literal["sglang", "openai", "local"]
    url: str | None = None
    path: str | None = None
    tokenizer: str | None = None
    model: str = "default"
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.kind in ("sglang", "openai") and not self.url:
            raise ValueError(f"a {self.kind} policy needs a URL")
        if self.kind == "local" and not self.path:
            raise ValueError("a local policy needs an HF model folder")
        if not (self.tokenizer or self.path):
            raise ValueError("give --tokenizer (an HF folder holding the model's tokenizer)")

    def describe(self) -> str:
        return f"{self.kind}:{self.url or self.path}"

    def check_exists(self) -> None:
        """`MissingCheckpointError` when a local policy's folder holds no complete HF model
        (`local.checkpoints.incomplete_reason`), or the `tokenizer` folder is missing."""
        if self.tokenizer and not Path(self.tokenizer).is_dir():
            raise MissingCheckpointError(f"no tokenizer folder at {self.tokenizer}")
        if self.kind != "local":
            return
        path = Path(str(self.path))
        incomplete = incomplete_reason(path)
        if incomplete is None:
            return
        if path.is_dir() and incomplete != "no config.json":
            raise MissingCheckpointError(
                f"{path} is no complete checkpoint ({incomplete}): a save interrupted before it "
                "was renamed into place, or a copy cut short; evaluate another checkpoint")
        found = saved_checkpoints(path.parent if path.parent.is_dir() else Path("runs"))
        shown = ", ".join(map(str, found[:_LISTED])) + (" ..." if len(found) > _LISTED else "")
        raise MissingCheckpointError(
            f"no checkpoint at {path} (no config.json); checkpoints that exist: "
            f"{shown or 'none under ' + str(path.parent if path.parent.is_dir() else 'runs/')}")


class MissingCheckpointError(FileNotFoundError):
    """A local policy's folder is not an HF model folder."""


_LISTED = 8


def saved_checkpoints(root: Path) -> list[Path]:
    """HF model folders (holding config.json) in `root` or below it, newest first."""
    found = [p.parent for p in root.rglob("config.json")] if root.is_dir() else []
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


@contextlib.asynccontextmanager
async def open_policy(spec: PolicySpec, cfg: Config
                      ) -> AsyncIterator[tuple[PolicyClient, ChatTokenizer]]:
    """The policy client and chat tokenizer of `spec`, released on exit."""
    tokenizer_path = spec.tokenizer or spec.path
    if spec.kind == "local":
        from evolving_rl.local.engine import LocalPolicy
        from evolving_rl.local.model import load_model, load_tokenizer

        hf_tokenizer = load_tokenizer(tokenizer_path)
        model = load_model(spec.path, spec.device, spec.dtype, trainable=False)
        local = LocalPolicy(model, hf_tokenizer, cfg.local, seed=cfg.run.seed)
        try:
            yield local, HFChatTokenizer(hf_tokenizer)
        finally:
            await local.close()
        return
    tokenizer = HFChatTokenizer.from_pretrained(tokenizer_path)
    client: SGLangPolicyClient | OpenAICompletionsClient
    if spec.kind == "sglang":
        client = SGLangPolicyClient.open(spec.url, cfg.clients)
    else:
        client = OpenAICompletionsClient.open(spec.url, spec.model, tokenizer.encode_text,
                                              cfg.clients)
    try:
        yield client, tokenizer
    finally:
        await client.close()
