"""The teacher switch's pure math (docs/design.md §4.6): a sample's teacher from its skills'
scored log-probs, and what a skill teaches the no-skill student.

Owns `mean_teacher` (per token, the unnormalised mean of the cards' log-probs: the log of the
skill-conditioned policies' geometric mean, whose mass over the vocabulary is below 1 where the
skills disagree), `mean_log_ratio` (Δ(e): the per-token mean of teacher - old
over an episode's trained tokens) and `TeachEvidence` (one skill's evidence over the source's
student episodes; its `value` is teach(s) = (1/n) Σ_e (R_e - mean R) · Δ_s(e)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def mean_teacher(per_skill: Sequence[Sequence[float]]) -> list[float]:
    """Per token, the mean over skills of their log-probs (all the same length, at least one)."""
    if not per_skill:
        raise ValueError("a teacher needs at least one skill's log-probs")
    length = len(per_skill[0])
    if any(len(row) != length for row in per_skill):
        raise ValueError("the skills' teacher log-probs differ in length")
    return [math.fsum(column) / len(per_skill) for column in zip(*per_skill, strict=True)]


def mean_log_ratio(teacher: Sequence[float], old: Sequence[float],
                   mask: Sequence[int]) -> float | None:
    """Mean of teacher - old over the mask's tokens; None when the mask has none."""
    if not len(teacher) == len(old) == len(mask):
        raise ValueError(f"misaligned: {len(teacher)} teacher, {len(old)} old, {len(mask)} mask")
    diffs = [t - o for t, o, m in zip(teacher, old, mask, strict=True) if m]
    if not diffs:
        return None
    value = math.fsum(diffs) / len(diffs)
    if not math.isfinite(value):
        raise ValueError(f"non-finite log-ratio {value}")
    return value


@dataclass(frozen=True)
class TeachEvidence:
    """One skill's evidence: the return R_e of every scored student episode and Δ_s(e)."""

    returns: tuple[float, ...]
    log_ratios: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.returns) != len(self.log_ratios):
            raise ValueError(f"{len(self.returns)} returns for {len(self.log_ratios)} log-ratios")

    @property
    def n(self) -> int:
        return len(self.returns)

    @property
    def value(self) -> float | None:
        """Cov(R, Δ_s) over the students (population form); None without a student; 0.0 when
        every student has the same return."""
        if not self.returns:
            return None
        mean = math.fsum(self.returns) / self.n
        return math.fsum((r - mean) * d for r, d in zip(self.returns, self.log_ratios,
                                                        strict=True)) / self.n + 0.0
