"""The four-stage training rollout: source episode -> N extractions -> K retrieved tasks ->
K x N x R downstream episodes, for every source task of the batch concurrently (the cells of
unusable skills too, as the reference plays them, unless `pipeline.unusable_skills: skip`).

Owns `RolloutOutcome` and `run_training_rollout`, the entry point the slime hooks and the local
backend call; what each source task produced is a `units.SourceUnit`. Retrieval for the whole
batch is one request, sent at the start so that it overlaps the source episodes; the source task
itself is excluded unless `pipeline.include_source_in_retrieval`. Episodes run under the
context's episode semaphore and extractions under its extraction semaphore; at most
`pipeline.max_concurrent_sources` source tasks run their stages at once (one: every policy request
in batch order, so no random draw depends on timing). Rewards, GRPO
advantages and role weights are computed by the core (see `assembly`); metrics in `metrics`.
Under `pipeline.method: grpo_baseline` the same entry point runs the plain GRPO solver baseline
instead (`baseline`: no retrieval, no extraction, nothing added to the skill library). Under
`pipeline.skill_use: teacher` each source task's downstream stage also plays its no-skill students
and scores them with the cards (`teacher.play_students`, docs/design.md §4.6).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from evolving_rl.clients.policy import SamplingParams
from evolving_rl.core.grid import Grid
from evolving_rl.core.samples import TrainSample
from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.assembly import Assembled, assemble
from evolving_rl.pipeline.baseline import play_baseline
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import play
from evolving_rl.pipeline.extraction import extract_skills
from evolving_rl.pipeline.metrics import StageTimes, baseline_metrics, rollout_metrics
from evolving_rl.pipeline.progress import live_bar
from evolving_rl.pipeline.similar_tasks import retrieve
from evolving_rl.pipeline.teacher import play_students, teacher_metrics
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.pipeline.units import Retrieved, SourceUnit

__all__ = ["RolloutOutcome", "play", "run_training_rollout"]

logger = logging.getLogger(__name__)


@dataclass
class RolloutOutcome:
    """What the backends train on, and what they log."""

    samples: list[TrainSample]
    metrics: dict[str, float]


async def _downstream(ctx: PipelineContext, clock: IOClock, grid: Grid, unit: SourceUnit,
                      sampling: SamplingParams) -> None:
    mode = ctx.cfg.pipeline.unusable_skills
    cells = [cell for cell in grid.cells()
             if cell.task < len(unit.retrieved) and unit.extractions[cell.skill].played(mode)]
    episodes = asyncio.gather(*(
        play(ctx, clock, unit.retrieved[cell.task],
             unit.extractions[cell.skill].solver_text(mode), sampling)
        for cell in cells))
    if ctx.cfg.pipeline.skill_use == "teacher":
        results, unit.students = await asyncio.gather(
            episodes, play_students(ctx, clock, unit, grid.n_repeats, sampling))
    else:
        results = await episodes
    unit.downstream = {grid.index(*cell): result
                       for cell, result in zip(cells, results, strict=True)}


async def _run_source(ctx: PipelineContext, clock: IOClock, grid: Grid, position: int,
                      task: TaskSpec, retrieval: asyncio.Task[Retrieved]) -> SourceUnit:
    sampling = ctx.cfg.sampling
    solver = ctx.sampling(sampling.solver, solver=True)
    unit = SourceUnit(position, task, await play(ctx, clock, task, None, solver))
    if unit.source.score is None or unit.source.trace is None:
        return unit  # no trajectory to learn from: the extractor has nothing to read
    extractions, retrieved = await asyncio.gather(
        extract_skills(ctx, clock, task, unit.source.trace.turns, unit.source.success,
                       grid.n_skills, ctx.sampling(sampling.extractor, solver=False)),
        asyncio.shield(retrieval))
    unit.extractions = extractions
    unit.retrieved = retrieved.tasks[position]
    await _downstream(ctx, clock, grid, unit, solver)
    return unit


async def _counted(bar: tqdm, work: Awaitable[SourceUnit]) -> SourceUnit:
    unit = await work
    bar.update(1)
    return unit


async def _evolving(ctx: PipelineContext, clock: IOClock, grid: Grid, tasks: list[TaskSpec],
                    tag: str, started: float, bar: tqdm) -> tuple[Assembled, dict[str, float]]:
    retrieval = asyncio.ensure_future(retrieve(ctx, clock, tasks, grid.top_k))
    gate = asyncio.Semaphore(ctx.cfg.pipeline.max_concurrent_sources or max(1, len(tasks)))

    async def gated(i: int, task: TaskSpec) -> SourceUnit:
        async with gate:  # FIFO: under a limit of 1 the sources run in batch order
            return await _run_source(ctx, clock, grid, i, task, retrieval)

    try:
        units = list(await asyncio.gather(
            *(_counted(bar, gated(i, task)) for i, task in enumerate(tasks))))
        retrieved = await retrieval
    finally:
        retrieval.cancel()
    assembled = assemble(ctx, units, grid, tag)
    ctx.library.append(assembled.records)
    wall = time.perf_counter() - started
    metrics = rollout_metrics(units, assembled, clock, StageTimes.of(units, wall), retrieved)
    if ctx.cfg.pipeline.skill_use == "teacher":
        metrics.update(teacher_metrics(units))
    return assembled, metrics


async def run_training_rollout(ctx: PipelineContext, rows: Sequence[Mapping[str, Any]], *,
                               rollout_id: int | str | None = None,
                               progress: bool = False) -> RolloutOutcome:
    """Run the four stages for every prepared row in `rows` (the batch's source tasks), or under
    `pipeline.method: grpo_baseline` the plain GRPO baseline (`baseline`); `progress`: a bar
    per finished source task, with the model replies and env calls so far (`live_bar`)."""
    started = time.perf_counter()
    clock = IOClock()
    tag = str(rollout_id) if rollout_id is not None else time.strftime("%Y%m%dT%H%M%S")
    pipeline = ctx.cfg.pipeline
    grid = Grid(pipeline.n_skills, pipeline.top_k, pipeline.n_repeats)
    tasks = [ctx.adapter.task_from_row(row) for row in rows]
    async with live_bar(clock, total=len(tasks), done=0, desc=f"rollout {tag}",
                        unit="source task", enabled=progress) as bar:
        if pipeline.method == "grpo_baseline":
            assembled, results = await play_baseline(ctx, clock, tasks,
                                                     grid.solver_episodes_per_source, tag)
            bar.update(len(tasks))
            metrics = baseline_metrics(len(tasks), results, assembled, clock,
                                       time.perf_counter() - started)
        else:
            assembled, metrics = await _evolving(ctx, clock, grid, tasks, tag, started, bar)
    logger.info("rollout %s (%s): %d samples from %d source tasks in %.1fs", tag,
                pipeline.method, len(assembled.samples), len(tasks),
                time.perf_counter() - started)
    return RolloutOutcome(assembled.samples, metrics)
