"""Rollout metrics: rewards and success per role, statuses, groups, audit, task types, timings.

Owns `StageTimes` (walls of the source and downstream stages and the downstream overlap: the
downstream stage's wall over the sequential sum of its episode durations) and
`rollout_metrics`, a flat `dict[str, float]` that both backends log as is (`baseline_metrics`:
the same names for the plain GRPO baseline).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus
from evolving_rl.pipeline.assembly import Assembled
from evolving_rl.pipeline.episode import EpisodeResult
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.pipeline.units import Retrieved, SourceUnit


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def _span(results: list[EpisodeResult]) -> tuple[float, float]:
    """(wall from first start to last end, sum of durations)."""
    if not results:
        return 0.0, 0.0
    start = min(r.started_s for r in results)
    end = max(r.started_s + r.duration_s for r in results)
    return end - start, sum(r.duration_s for r in results)


@dataclass(frozen=True)
class StageTimes:
    wall_s: float
    source_wall_s: float
    source_sum_s: float
    downstream_wall_s: float
    downstream_sum_s: float

    @classmethod
    def of(cls, units: list[SourceUnit], wall_s: float) -> StageTimes:
        source = _span([u.source for u in units])
        down = _span([r for u in units for r in u.downstream.values()])
        return cls(wall_s, *source, *down)

    def metrics(self) -> dict[str, float]:
        overlap = self.downstream_wall_s / self.downstream_sum_s if self.downstream_sum_s else 0.0
        return {"timing/source_stage_wall_s": self.source_wall_s,
                "timing/source_episodes_sum_s": self.source_sum_s,
                "timing/downstream_stage_wall_s": self.downstream_wall_s,
                "timing/downstream_episodes_sum_s": self.downstream_sum_s,
                "timing/downstream_overlap": overlap}


def _episode_metrics(prefix: str, results: list[EpisodeResult]) -> dict[str, float]:
    scored = [r for r in results if r.score is not None]
    actions = Counter[str]()
    for result in results:
        actions.update(result.action_statuses)
    n_actions = sum(actions.values())
    out = {f"{prefix}/episodes": float(len(results)),
           f"{prefix}/success_rate": _mean(float(r.success) for r in scored),
           f"{prefix}/steps_mean": _mean(r.n_steps for r in results),
           f"{prefix}/invalid_action_fraction":
               (n_actions - actions["ok"]) / n_actions if n_actions else 0.0}
    out.update({f"{prefix}/status/{status}": float(n) for status, n in
                Counter(r.status.value for r in results).items()})
    out.update({f"{prefix}/action/{status}": float(n) for status, n in actions.items()})
    return out


def _extractor_metrics(assembled: Assembled) -> dict[str, float]:
    rewards = assembled.extractor_rewards
    out: dict[str, float] = {"extractor/generations": float(len(rewards))}
    out["extractor/parse_ok_rate"] = _mean(
        float(bool(e.parse and e.parse.ok)) for _, e, _ in rewards)
    out["extractor/usable_rate"] = _mean(float(e.usable) for _, e, _ in rewards)
    out["extractor/truncated_rate"] = _mean(
        float(e.status is SampleStatus.TRUNCATED) for _, e, _ in rewards)
    out["extractor/audit_failures"] = float(
        sum(1 for _, e, _ in rewards if e.audit is not None and not e.audit.ok))
    # extractions told another outcome than their source episode's (0 unless the stage is broken)
    out["extractor/told_wrong_outcome"] = float(
        sum(1 for u, e, _ in rewards if e.told_success != u.source.success))
    for key, counts in (("reward_status", Counter(str(r.status) for _, _, r in rewards)),
                        ("status", Counter(e.status.value for _, e, _ in rewards)),
                        ("parse", Counter(str(e.parse.kind) for _, e, _ in rewards if e.parse)),
                        ("audit", Counter(str(e.audit.rule) for _, e, _ in rewards
                                          if e.audit and e.audit.rule))):
        out.update({f"extractor/{key}/{name}": float(n) for name, n in counts.items()})
    return out


def _solver_by_type(results: list[EpisodeResult]) -> dict[str, float]:
    solver: dict[str, list[float]] = defaultdict(list)
    for result in results:
        if result.score is not None:
            solver[result.task.task_type].append(float(result.success))
    return {f"task_type/{t}/solver_success": _mean(v) for t, v in solver.items()}


def _per_task_type(units: list[SourceUnit], assembled: Assembled) -> dict[str, float]:
    out = _solver_by_type([r for u in units for r in u.downstream.values()])
    extractor: dict[str, list[float]] = defaultdict(list)
    for unit, _, reward in assembled.extractor_rewards:
        if reward.value is not None:
            extractor[unit.task.task_type].append(reward.value)
    out.update({f"task_type/{t}/extractor_reward": _mean(v) for t, v in extractor.items()})
    return out


def _sample_metrics(assembled: Assembled) -> dict[str, float]:
    out: dict[str, float] = {}
    for role in Role:
        kept = [s for s in assembled.samples if s.role is role]
        out[f"{role.value}/samples"] = float(len(kept))
        out[f"{role.value}/reward_mean"] = _mean(s.reward for s in kept if s.reward is not None)
        out[f"{role.value}/advantage_abs_mean"] = _mean(abs(s.advantage) for s in kept)
    out["samples/dropped"] = float(len(assembled.candidates) - len(assembled.samples))
    groups = assembled.advantages
    out["groups/count"] = float(sum(1 for g in groups.groups if g.size > 0))
    out["groups/zero_variance"] = float(len(groups.zero_variance_groups))
    out["groups/zero_variance_fraction"] = groups.zero_variance_fraction
    for role in (Role.EXTRACTOR, Role.SOLVER):  # solver groups include the source-episode group
        out[f"groups/{role}/count"] = float(sum(
            1 for g in groups.groups if g.size > 0 and g.group_id.role is role))
        out[f"groups/{role}/zero_variance"] = float(
            sum(1 for key in groups.zero_variance_groups if key.role is role))
    return out


def rollout_metrics(units: list[SourceUnit], assembled: Assembled, clock: IOClock,
                    stages: StageTimes, retrieved: Retrieved) -> dict[str, float]:
    """Every metric of one rollout (names are `<area>/<what>`)."""
    out = {"rollout/source_tasks": float(len(units))}
    out.update(_episode_metrics("source", [u.source for u in units]))
    out.update(_episode_metrics("solver", [r for u in units for r in u.downstream.values()]))
    out.update(_extractor_metrics(assembled))
    out.update(_per_task_type(units, assembled))
    out.update(_sample_metrics(assembled))
    out["retrieval/failed"] = float(retrieved.error is not None)
    out["retrieval/unknown_ids"] = float(retrieved.unknown_ids)
    out["retrieval/source_retrieved"] = float(
        sum(1 for u in units for t in u.retrieved if t.id == u.task.id))
    out.update(clock.metrics(stages.wall_s))
    out.update(stages.metrics())
    return out


def baseline_metrics(n_sources: int, results: list[EpisodeResult], assembled: Assembled,
                     clock: IOClock, wall_s: float) -> dict[str, float]:
    """The plain GRPO baseline's metrics: its solver episodes under the full method's solver
    names (`solver/...`, `groups/solver/...`), so that summaries and plots read both alike; its
    episodes are timed as the downstream stage (no source stage)."""
    out = {"rollout/source_tasks": float(n_sources)}
    out.update(_episode_metrics("solver", results))
    out.update(_solver_by_type(results))
    out.update(_sample_metrics(assembled))
    out.update(clock.metrics(wall_s))
    out.update(StageTimes(wall_s, 0.0, 0.0, *_span(results)).metrics())
    return out
