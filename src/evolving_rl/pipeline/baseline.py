"""The plain GRPO solver baseline (`pipeline.method: grpo_baseline`): no retrieval, no
extraction, no skills.

Owns `play_baseline`: every source task of the batch is played G times without a skill (G = the
full method's solver episodes per source task, `core.grid.Grid.solver_episodes_per_source`),
with the solver's rollout sampling, under the context's episode semaphore. Its samples are the
full method's solver samples (`assembly.episode_samples`: the adapter's packing, the solver
reward, `pipeline.solver_grouping`), grouped one GRPO group per source task
(`core.grid.baseline_group_id`), with advantages and role weights by `assembly.finalize`. Nothing
is appended to the skill library.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from evolving_rl.core.grid import baseline_group_id
from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.assembly import Assembled, episode_samples, finalize
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import EpisodeResult, play
from evolving_rl.pipeline.timing import IOClock

__all__ = ["play_baseline"]


async def play_baseline(ctx: PipelineContext, clock: IOClock, tasks: Sequence[TaskSpec],
                        group_size: int, tag: str) -> tuple[Assembled, list[EpisodeResult]]:
    """Samples with advantages for the batch, and every episode played (source-major)."""
    sampling = ctx.sampling(ctx.cfg.sampling.solver, solver=True)
    results = list(await asyncio.gather(
        *(play(ctx, clock, task, None, sampling) for task in tasks for _ in range(group_size))))
    out = Assembled.empty()
    for position, task in enumerate(tasks):
        group = baseline_group_id(f"{position}:{task.id}")
        for repeat in range(group_size):
            out.candidates += episode_samples(
                ctx, results[position * group_size + repeat], group,
                {"rollout": tag, "source_id": task.id, "repeat": repeat})
    return finalize(ctx, out), results
