"""Evaluation protocol (docs/design.md §8), greedy, per test task and repeat:

  1. retrieve the top-1 task of the training split (never the test task itself);
  2. play it without a skill and extract one skill from that episode;
  3. play the test task with that skill and without any skill.
With `library` given, step 2 is replaced by the best usable skill the library holds for the
retrieved task (a persisted library built during training), validated again in the format its
record names and rendered to its card. The report gives success with and
without the skill, overall and per task type, as mean and population std over the repeats, plus
how often a usable skill was obtained and how many episodes failed for infrastructure reasons.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evolving_rl.core.skill import render_skill_card, validate_skill
from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import EpisodeResult
from evolving_rl.pipeline.extraction import extract_skills
from evolving_rl.pipeline.rollout import play, retrieve
from evolving_rl.pipeline.skill_library import SkillLibrary, SkillRecord
from evolving_rl.pipeline.timing import IOClock


@dataclass
class EvalCase:
    """One test task in one repeat."""

    task: TaskSpec
    repeat: int
    skill_card: str | None = None
    with_skill: EpisodeResult | None = None
    without_skill: EpisodeResult | None = None

    def result(self, arm: str) -> EpisodeResult | None:
        """The episode of an arm; without a usable skill both arms are the plain episode."""
        if arm == "with_skill" and self.skill_card is not None:
            return self.with_skill
        return self.without_skill


async def _skill_for(ctx: PipelineContext, clock: IOClock, retrieved: TaskSpec | None,
                     library: dict[str, SkillRecord] | None) -> str | None:
    if retrieved is None:
        return None
    if library is not None:
        record = library.get(retrieved.id)
        if record is None or record.skill is None:
            return None
        parsed = validate_skill(record.skill, record.skill_format)
        return render_skill_card(parsed.skill) if parsed.skill is not None else None
    sampling = ctx.cfg.sampling
    source = await play(ctx, clock, retrieved, None,
                        ctx.sampling(sampling.eval_solver, solver=True))
    if source.trace is None or source.score is None:
        return None
    (extraction,) = await extract_skills(
        ctx, clock, retrieved, source.trace.turns, source.success, 1,
        ctx.sampling(sampling.eval_extractor, solver=False))
    return extraction.card if extraction.usable else None


async def _run_case(ctx: PipelineContext, clock: IOClock, case: EvalCase,
                    retrieved: TaskSpec | None, library: dict[str, SkillRecord] | None) -> None:
    solver = ctx.sampling(ctx.cfg.sampling.eval_solver, solver=True)
    without = asyncio.ensure_future(play(ctx, clock, case.task, None, solver))
    case.skill_card = await _skill_for(ctx, clock, retrieved, library)
    if case.skill_card is not None:
        case.with_skill = await play(ctx, clock, case.task, case.skill_card, solver)
    case.without_skill = await without


def _rate(results: list[EpisodeResult | None]) -> float | None:
    scored = [r for r in results if r is not None and r.score is not None]
    return statistics.fmean(float(r.success) for r in scored) if scored else None


def _report(cases: list[EvalCase], repeats: int) -> dict[str, float]:
    """Success with/without skill per repeat, then mean and std over repeats, per task type."""
    buckets: dict[str, list[EvalCase]] = defaultdict(list)
    for case in cases:
        buckets["all"].append(case)
        buckets[f"task_type/{case.task.task_type}"].append(case)
    out: dict[str, float] = {}
    for name, members in buckets.items():
        for arm in ("with_skill", "without_skill"):
            rates = [_rate([c.result(arm) for c in members if c.repeat == r])
                     for r in range(repeats)]
            rates = [rate for rate in rates if rate is not None]
            if rates:
                out[f"eval/{name}/{arm}_success_mean"] = statistics.fmean(rates)
                out[f"eval/{name}/{arm}_success_std"] = statistics.pstdev(rates)
    out["eval/skill_obtained_rate"] = statistics.fmean(
        float(c.skill_card is not None) for c in cases) if cases else 0.0
    out["eval/infra_failures"] = float(sum(
        1 for c in cases for r in (c.with_skill, c.without_skill)
        if r is not None and r.score is None))
    out["eval/cases"] = float(len(cases))
    return out


async def run_eval(ctx: PipelineContext, rows: Sequence[Mapping[str, Any]], *,
                   repeats: int = 1, library: SkillLibrary | None = None) -> dict[str, float]:
    """Run the protocol on the test `rows`, `repeats` times; returns flat metrics."""
    clock = IOClock()
    tasks = [ctx.adapter.task_from_row(row) for row in rows]
    retrieved = await retrieve(ctx, clock, tasks, 1)
    best = library.best_by_source() if library is not None else None
    cases = [EvalCase(task, r) for r in range(repeats) for task in tasks]
    await asyncio.gather(*(
        _run_case(ctx, clock, case, next(iter(retrieved.tasks[i % len(tasks)]), None), best)
        for i, case in enumerate(cases)))
    out = _report(cases, repeats)
    out["eval/retrieval_failed"] = float(retrieved.error is not None)
    return out
