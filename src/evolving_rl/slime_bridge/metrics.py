"""Rollout and eval metrics for the slime loggers, from our sample tags and the pipeline's metrics.

Owns the metric names under `rollout/` that slime's default logger cannot know: per role
(extractor / solver) counts, rewards, advantages, token counts and truncation; rewards per task
type and role; zero-variance GRPO groups per role; skill parse and audit failures (from the
extractor samples' metadata keys `PARSE_KEY` / `AUDIT_KEY` when the pipeline sets them); statuses.
The pipeline's own metrics (timings, removed samples by status, ...) pass through under
`rollout/pipeline/`. Pure functions; emission is the hooks' business.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from evolving_rl.core.roles import Role
from evolving_rl.slime_bridge.samples import SampleTag

TASK_TYPE_KEY = "task_type"
PARSE_KEY = "skill_parsed"
AUDIT_KEY = "audit_passed"


def _role_metrics(role: Role, samples: Sequence[Any], tags: Sequence[SampleTag]) -> dict:
    prefix = f"rollout/{role.value}"
    out: dict[str, float] = {f"{prefix}/count": float(len(samples))}
    if not samples:
        return out
    out[f"{prefix}/reward_mean"] = fmean(float(s.reward) for s in samples)
    out[f"{prefix}/advantage_abs_mean"] = fmean(abs(t.advantage) for t in tags)
    out[f"{prefix}/response_tokens_mean"] = fmean(s.response_length for s in samples)
    out[f"{prefix}/trainable_tokens_mean"] = fmean(sum(s.loss_mask) for s in samples)
    out[f"{prefix}/truncated_frac"] = fmean(t.status.value == "truncated" for t in tags)
    by_type: dict[str, list[float]] = defaultdict(list)
    by_group: dict[str, list[float]] = defaultdict(list)
    for sample, tag in zip(samples, tags, strict=True):
        by_type[str(sample.metadata.get(TASK_TYPE_KEY, "unknown"))].append(float(sample.reward))
        by_group[tag.group_id].append(float(sample.reward))
    for task_type, rewards in sorted(by_type.items()):
        out[f"{prefix}/task_type/{task_type}/reward_mean"] = fmean(rewards)
        out[f"{prefix}/task_type/{task_type}/count"] = float(len(rewards))
    flat_groups = sum(1 for rewards in by_group.values() if min(rewards) == max(rewards))
    out[f"{prefix}/groups"] = float(len(by_group))
    out[f"{prefix}/zero_variance_groups"] = float(flat_groups)
    out[f"{prefix}/zero_variance_frac"] = flat_groups / len(by_group)
    for key, name in ((PARSE_KEY, "parse_failures"), (AUDIT_KEY, "audit_failures")):
        out[f"{prefix}/{name}"] = float(sum(s.metadata.get(key) is False for s in samples))
    return out


def rollout_metrics(samples: Sequence[Any], pipeline_metrics: Mapping[str, Any] | None,
                    rollout_time: float) -> dict[str, float]:
    """All our rollout metrics for one rollout's (flat) slime samples."""
    tags = [SampleTag.of(sample) for sample in samples]
    out: dict[str, float] = {"rollout/time_s": float(rollout_time)}
    for role in Role:
        members = [(s, t) for s, t in zip(samples, tags, strict=True) if t.role is role]
        out |= _role_metrics(role, [s for s, _ in members], [t for _, t in members])
    for status, count in sorted(Counter(t.status.value for t in tags).items()):
        out[f"rollout/status/{status}"] = float(count)
    for key, value in (pipeline_metrics or {}).items():
        out[f"rollout/pipeline/{key}"] = float(value)
    return out


def eval_metrics(per_dataset: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """`eval/<dataset>/<metric>` from each eval dataset's pipeline metrics (`eval/x` or `x`)."""
    return {f"eval/{name}/{key.removeprefix('eval/')}": float(value)
            for name, metrics in per_dataset.items() for key, value in metrics.items()}
