"""Builds a `PipelineContext` around fakes (scripted policy, toy env, in-memory retrieval)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from evolving_rl.config import Config, parse_config
from evolving_rl.config.schema import RoleSampling
from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.context import PipelineContext, TaskCatalog, make_adapter
from evolving_rl.pipeline.skill_library import SkillLibrary
from tests.fakes.scripted import ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import FakeEnvClient, FakeRetrievalClient


def toy_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "question": f"put mug {i} on the desk.", "prompt": "",
             "metadata": {"split": "train", "task_type": f"type{i % 2}", "game": f"game{i}"}}
            for i in range(n)]


def turn_sampling(tokens: int) -> dict[str, Any]:
    """A `sampling` section whose solver turns (training and evaluation) take at most `tokens`
    new tokens, every other value the schema's default."""
    defaults = RoleSampling()
    return {role: {**dataclasses.asdict(getattr(defaults, role)), "max_new_tokens": tokens}
            for role in ("solver", "eval_solver")}


def with_turn_tokens(cfg: Config, tokens: int) -> Config:
    """`cfg` with both solver roles' turns capped at `tokens` new tokens."""
    sampling = cfg.sampling
    return dataclasses.replace(cfg, sampling=dataclasses.replace(
        sampling, solver=dataclasses.replace(sampling.solver, max_new_tokens=tokens),
        eval_solver=dataclasses.replace(sampling.eval_solver, max_new_tokens=tokens)))


def small_config(turn_tokens: int = 200, **pipeline: Any) -> Config:
    # The byte tokenizer spends a token per byte: the reference extractor prompt alone is ~5.3k.
    sizes = {"n_skills": 3, "top_k": 2, "n_repeats": 2, "max_steps": 4,
             "max_context_tokens": 16384, **pipeline}
    return parse_config({"pipeline": sizes, "sampling": turn_sampling(turn_tokens)})


def fake_context(tmp_path: Path, cfg: Config | None = None, *, policy: Any = None,
                 env: Any = None, retrieval: Any = None, n_tasks: int = 6) -> PipelineContext:
    cfg = cfg or small_config()
    adapter = make_adapter(cfg, lenient=cfg.alfworld.action_format == "number")
    rows = toy_rows(n_tasks)
    tokenizer = ByteChatTokenizer()
    return PipelineContext(
        cfg=cfg, adapter=adapter, policy=policy or ScriptedPolicy(tokenizer),
        tokenizer=tokenizer, env=env or FakeEnvClient(),
        retrieval=retrieval or FakeRetrievalClient([r["id"] for r in rows]),
        catalog=TaskCatalog({r["id"]: adapter.task_from_row(r) for r in rows}),
        library=SkillLibrary.in_run_dir(tmp_path))


def toy_task(ctx: PipelineContext, task_id: str = "t0") -> TaskSpec:
    task = ctx.catalog.get(task_id)
    assert task is not None
    return task
