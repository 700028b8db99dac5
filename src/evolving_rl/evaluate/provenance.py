"""What an evaluation's cases are computed from, as digests: the key its finished cases are kept
under, so that a rerun reuses only cases of the same policy, settings and data.

Owns `EvalKey` (four digests and `key`, the digest of the four) and `eval_key`:
  policy    `--local`: every file of the checkpoint folder (relative name, size and content; a
            7B folder takes seconds) and of `--tokenizer` when given, with the device and dtype;
            a URL source: kind, URL, model name and the tokenizer folder's files. A served model
            cannot be digested beyond that: a server restarted at the same address with other
            weights reads as the same policy.
  config    `config.to_dict` without the run-local settings (`RUN_LOCAL`: hosts, ports, thread
            and worker counts, and every `*_dir` / `*_path` location: what the data folders hold
            is digested under `data`).
  protocol  the retrieval and training splits, and the library file's content when one is given.
  data      the prepared split files read: the evaluated splits, the training split and the
            retrieval split (`retrieval.prepared_dir` when set).
Repeats, the task limit and the protocols are left out: a case is named by protocol, split, task
and repeat, so a rerun with more repeats or tasks reuses the cases already run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolving_rl.config import to_dict
from evolving_rl.config.schema import Config
from evolving_rl.evaluate.policies import PolicySpec
from evolving_rl.retrieval.prepared import environment_prepared_dir, prepared_dir_for

RUN_LOCAL = re.compile(r"^(host|port|threads|n_workers)$|_(port|threads|workers|dir|path)$"
                       r"|^threads_")
_CHUNK = 1 << 20
_SHOWN = 16  # hex digits of a digest


@dataclass(frozen=True)
class EvalKey:
    """The digests of what the cases are computed from (module docstring)."""

    policy: str
    config: str
    protocol: str
    data: str

    @property
    def key(self) -> str:
        return _digest_of([self.policy, self.config, self.protocol, self.data])

    def as_meta(self) -> dict[str, str]:
        return {"cases_key": self.key, "policy_digest": self.policy,
                "config_digest": self.config, "protocol_digest": self.protocol,
                "data_digest": self.data}


def _digest_of(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_SHOWN]


def files_digest(paths: Iterable[Path], root: Path | None = None) -> str:
    """Digest of the files' names (relative to `root` when given, else the file name alone: a
    folder's location is no part of it), sizes and contents; a missing file counts by name."""
    digest = hashlib.sha256()
    for path in paths:
        name = str(path.relative_to(root)) if root is not None else path.name
        size = path.stat().st_size if path.is_file() else -1
        digest.update(f"{name}\0{size}\0".encode())
        if size >= 0:
            with path.open("rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
    return digest.hexdigest()[:_SHOWN]


def folder_digest(folder: Path) -> str:
    """Digest of every file in `folder` and below it."""
    return files_digest(sorted(p for p in folder.rglob("*") if p.is_file()), root=folder)


def policy_digest(spec: PolicySpec) -> str:
    tokenizer = folder_digest(Path(spec.tokenizer)) if spec.tokenizer else None
    if spec.kind == "local":
        return _digest_of(["local", folder_digest(Path(str(spec.path))), tokenizer,
                           spec.device, spec.dtype])
    return _digest_of([spec.kind, spec.url, spec.model, tokenizer])


def outcome_settings(cfg: Config) -> dict[str, Any]:
    """The config as a dict without its run-local settings (`RUN_LOCAL`)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not RUN_LOCAL.search(k)}
        return value
    return strip(to_dict(cfg))


def data_files(cfg: Config, splits: Iterable[str], retrieval_split: str) -> list[Path]:
    prepared = environment_prepared_dir(cfg)
    files = [prepared / f"{split}.jsonl" for split in sorted(set(splits))]
    return [*files, prepared_dir_for(cfg) / f"{retrieval_split}.jsonl"]


def eval_key(cfg: Config, spec: PolicySpec, splits: Iterable[str], train_split: str,
             retrieval_split: str, library: Path | None) -> EvalKey:
    """The key of an evaluation of `spec` on `splits` (module docstring)."""
    protocol = _digest_of([retrieval_split, train_split,
                           files_digest([library]) if library is not None else None])
    return EvalKey(policy=policy_digest(spec), config=_digest_of(outcome_settings(cfg)),
                   protocol=protocol,
                   data=files_digest(data_files(cfg, [*splits, train_split], retrieval_split)))
