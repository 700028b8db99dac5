"""One training rollout of the pipeline against real servers and a fake SGLang server over HTTP:
what the contract tests of every environment run (`tests/pipeline/test_pipeline_contract*.py`).

`run_contract_rollout(cfg, responder, rows, ...)` starts `FakeSGLang` answering with
`responder`, builds the context over the config's real env and retrieval servers (byte
tokenizer; `policy_wrapper` may wrap the HTTP policy client), runs `run_training_rollout` with a
timeout and releases everything; it returns the outcome, the fake (its requests) and the context.
`with_pipeline(cfg, **changes)` is `cfg` with pipeline keys changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from collections.abc import Callable
from typing import Any

from env.launch import free_port
from evolving_rl.clients.policy import SGLangPolicyClient
from evolving_rl.config import Config
from evolving_rl.pipeline.context import PipelineContext, build_context
from evolving_rl.pipeline.rollout import RolloutOutcome, run_training_rollout
from tests.fakes.sglang_server import FakeSGLang
from tests.fakes.tokenizer import ByteChatTokenizer


async def _rollout(cfg: Config, responder: Callable[[str], str], rows: list[dict],
                   policy_wrapper: Callable[[Any], Any] | None, timeout_s: float
                   ) -> tuple[RolloutOutcome, FakeSGLang, PipelineContext]:
    fake = FakeSGLang(responder=responder)
    url = await fake.start(free_port())
    policy = SGLangPolicyClient.open(url, cfg.clients)
    ctx = await build_context(cfg, policy_wrapper(policy) if policy_wrapper else policy,
                              ByteChatTokenizer(), run_dir=tempfile.mkdtemp(prefix="run-"))
    try:
        outcome = await asyncio.wait_for(run_training_rollout(ctx, rows), timeout_s)
    finally:
        await ctx.close()
        await policy.close()
        await fake.stop()
    return outcome, fake, ctx


def run_contract_rollout(cfg: Config, responder: Callable[[str], str], rows: list[dict],
                         policy_wrapper: Callable[[Any], Any] | None = None,
                         timeout_s: float = 240.0
                         ) -> tuple[RolloutOutcome, FakeSGLang, PipelineContext]:
    """The module docstring's rollout, run to its end in a fresh event loop."""
    return asyncio.run(_rollout(cfg, responder, rows, policy_wrapper, timeout_s))


def with_pipeline(cfg: Config, **changes: Any) -> Config:
    return dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, **changes))
