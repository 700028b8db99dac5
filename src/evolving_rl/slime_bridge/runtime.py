"""Per-process state of the rollout hooks: config, event loop, pipeline context, prompt rows.

slime calls our rollout function as a plain function, many times, in its RolloutManager Ray
actor. The pipeline's async clients must outlive one call and stay on one event loop, so each
process keeps one `Runtime` per config file: the validated config, a daemon thread running an
event loop, and the pipeline context built on that loop once (from our config, the SGLang router
at `args.sglang_router_ip/port` and the tokenizer at `args.hf_checkpoint`). `RUNTIMES` is that
cache — the one piece of module state the hook interface forces on us. A config whose
environment has no registered domain (`domains.registry`) fails there, before anything starts.
When the config samples at top-p < 1 (= `--rollout-top-p`, checked by `check_slime_args`), the
context's policy client asks SGLang for every generation's nucleus, which the samples carry for
slime's top-p replay.

A prompt row is one line of a prepared split file (`retrieval.prepared`): `{"id", "question",
"prompt", "metadata"}`. slime's data source keeps `prompt` (`--input-key prompt`), `label`
(`--label-key id`) and `metadata`; `row_from_sample` rebuilds the row from them. Eval rows are read
from the `--eval-prompt-data name path ...` files with the same reader.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from argparse import Namespace
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evolving_rl.config import Config
from evolving_rl.domains.registry import domain_for
from evolving_rl.retrieval.prepared import read_prepared
from evolving_rl.slime_bridge.settings import check_slime_args, load_run_config

logger = logging.getLogger(__name__)
T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="evolving_rl-rollout-loop")
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and block until it finishes (its exception propagates)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


@dataclass
class Runtime:
    """What one process keeps between rollout calls."""

    config: Config
    loop: LoopThread
    context: Any


RUNTIMES: dict[str, Runtime] = {}


def policy_url(args: Namespace) -> str:
    """The SGLang router slime started, as a base URL."""
    host, port = args.sglang_router_ip, args.sglang_router_port
    if not host or not port:
        raise RuntimeError("slime args carry no sglang_router_ip/port (is the router running?)")
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"


def top_p_replay(config: Config) -> bool:
    """Whether the samples must carry their nucleus: training samples at top-p < 1."""
    return config.sampling.solver.top_p < 1.0 or config.sampling.extractor.top_p < 1.0


async def _build_context(config: Config, args: Namespace) -> Any:
    from evolving_rl.pipeline.context import build_context

    return await build_context(config, policy_url=policy_url(args),
                               tokenizer_path=args.hf_checkpoint,
                               top_p_replay=top_p_replay(config))


def get_runtime(args: Namespace) -> Runtime:
    """This process's runtime for the config named on `args`, validated and built once."""
    config = load_run_config(args)
    key = str(Path(args.evolving_rl_config).resolve())
    if key not in RUNTIMES:
        domain_for(config)
        check_slime_args(args, config)
        loop = LoopThread()
        RUNTIMES[key] = Runtime(config=config, loop=loop,
                                context=loop.run(_build_context(config, args)))
        logger.info("evolving_rl runtime ready (config %s, policy %s)", key, policy_url(args))
    return RUNTIMES[key]


def row_from_sample(sample: Any) -> dict[str, Any]:
    """The prompt row behind one slime data-source sample."""
    if not isinstance(sample.prompt, str) or not sample.metadata:
        raise ValueError(
            f"data-source sample {sample.index} has no plain prompt or no metadata: use our prompt "
            "JSONL with --input-key prompt --label-key id and without --apply-chat-template")
    return {"id": sample.label, "question": sample.prompt, "prompt": sample.prompt,
            "metadata": dict(sample.metadata)}


def training_rows(data_source: Any, n_rows: int) -> list[dict[str, Any]]:
    """The next `n_rows` source-task rows from slime's data source (one sample per prompt)."""
    groups = data_source.get_samples(n_rows)
    if any(len(group) != 1 for group in groups):
        raise ValueError("data source returned several samples per prompt: use "
                         "--n-samples-per-prompt 1 (the pipeline expands each source task)")
    return [row_from_sample(group[0]) for group in groups]


def eval_datasets(args: Namespace) -> dict[str, list[dict[str, Any]]]:
    """Rows of each `--eval-prompt-data name path` pair, read from its JSONL file."""
    pairs = list(getattr(args, "eval_prompt_data", None) or [])
    if not pairs or len(pairs) % 2:
        raise ValueError("evaluation needs --eval-prompt-data given as name/path pairs")
    datasets = {}
    for name, path in zip(pairs[::2], pairs[1::2], strict=True):
        datasets[name] = [row.as_dict() for row in read_prepared(path)]
    return datasets
