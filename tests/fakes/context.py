"""Builds a `PipelineContext` around fakes (scripted policy, toy env, in-memory retrieval)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evolving_rl.config import Config, parse_config
from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.context import PipelineContext, TaskCatalog, make_adapter
from evolving_rl.pipeline.skill_library import SkillLibrary
from tests.fakes.env import FakeEnvClient, FakeRetrievalClient
from tests.fakes.scripted import ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer


def toy_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "question": f"put mug {i} on the desk.", "prompt": "",
             "metadata": {"split": "train", "task_type": f"type{i % 2}", "game": f"game{i}"}}
            for i in range(n)]


def small_config(**pipeline: Any) -> Config:
    # The byte tokenizer spends a token per byte: the reference extractor prompt alone is ~5.3k.
    sizes = {"n_skills": 3, "top_k": 2, "n_repeats": 2, "max_steps": 4,
             "max_turn_tokens": 200, "max_context_tokens": 16384, **pipeline}
    return parse_config({"pipeline": sizes})


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
