"""GRPO advantages over explicit group ids: advantage = (r - mean) / (std + eps), per group.

Owns the group normalisation used for both roles. Conventions:
  - std is the population std (divide by n), over the group's scored entries;
  - a reward of None (a failed sample) is excluded from its group before normalisation and gets
    advantage None and keep False;
  - a zero-variance group (all scored rewards identical, which includes groups of one, or a std
    that underflows to 0) gives advantages of exactly 0.0 and is listed in
    `zero_variance_groups`; with `drop_zero_variance` its entries also get keep False;
  - group ids are any hashables (need not be contiguous or sorted); group order in the result is
    first appearance.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

DEFAULT_EPS = 1e-6


@dataclass(frozen=True)
class GroupStats:
    """`size` counts scored entries, `n_failed` the None ones; mean/std are None when size 0."""

    group_id: Hashable
    size: int
    n_failed: int
    mean: float | None
    std: float | None


@dataclass(frozen=True)
class GroupAdvantages:
    """Advantages and keep-mask aligned with the input, plus per-group statistics."""

    advantages: tuple[float | None, ...]
    keep: tuple[bool, ...]
    zero_variance_groups: tuple[Hashable, ...]
    groups: tuple[GroupStats, ...]

    @property
    def zero_variance_fraction(self) -> float:
        """Share of non-empty groups that have zero variance (a training-health metric)."""
        scored = sum(1 for stats in self.groups if stats.size > 0)
        return len(self.zero_variance_groups) / scored if scored else 0.0


def _group_stats(group_id: Hashable, rewards: list[float], n_failed: int) -> GroupStats:
    if not rewards:
        return GroupStats(group_id, 0, n_failed, None, None)
    mean = math.fsum(rewards) / len(rewards)
    variance = math.fsum((reward - mean) ** 2 for reward in rewards) / len(rewards)
    return GroupStats(group_id, len(rewards), n_failed, mean, math.sqrt(variance))


def group_advantages(
    group_ids: Sequence[Hashable],
    rewards: Sequence[float | None],
    *,
    eps: float = DEFAULT_EPS,
    drop_zero_variance: bool = False,
) -> GroupAdvantages:
    """Normalise `rewards` within the groups named by the parallel `group_ids`."""
    if len(group_ids) != len(rewards):
        raise ValueError(f"{len(group_ids)} group ids but {len(rewards)} rewards")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    members: dict[Hashable, list[float]] = {}
    failed: dict[Hashable, int] = {}
    for group_id, reward in zip(group_ids, rewards, strict=True):
        members.setdefault(group_id, [])
        if reward is None:
            failed[group_id] = failed.get(group_id, 0) + 1
        elif not math.isfinite(reward):
            raise ValueError(f"reward must be finite or None, got {reward} in group {group_id!r}")
        else:
            members[group_id].append(float(reward))
    stats = {gid: _group_stats(gid, values, failed.get(gid, 0)) for gid, values in members.items()}
    zero_variance = tuple(
        gid
        for gid, values in members.items()
        if values and (min(values) == max(values) or stats[gid].std == 0.0)
    )
    flat_groups = set(zero_variance)
    advantages: list[float | None] = []
    keep: list[bool] = []
    for group_id, reward in zip(group_ids, rewards, strict=True):
        group = stats[group_id]
        if reward is None:
            advantages.append(None)
            keep.append(False)
        elif group_id in flat_groups:
            advantages.append(0.0)
            keep.append(not drop_zero_variance)
        else:
            advantages.append((reward - group.mean) / (group.std + eps))
            keep.append(True)
    return GroupAdvantages(tuple(advantages), tuple(keep), zero_variance, tuple(stats.values()))
