"""Significance of a difference between two win counts: Fisher's exact test, two-sided.

Owns `fisher_exact` (the p-value of a 2x2 table [[wins_a, losses_a], [wins_b, losses_b]] under
the hypergeometric null with the margins fixed; two-sided as in R's `fisher.test` and SciPy's
`fisher_exact`: the summed probability of every table no more likely than the observed one, with a
relative tolerance of 1e-7 for ties), `Pooled` (wins out of episodes of one arm), `pool` (the sum of
several, e.g. over seeds) and `fisher_or_none` (the test where both sides have episodes). The
local comparison reports and the scaling table use them for pooled held-out wins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

TIE_TOLERANCE = 1e-7


@dataclass(frozen=True)
class Pooled:
    """Wins out of `episodes` (pooled over seeds)."""

    wins: int
    episodes: int

    def __post_init__(self) -> None:
        if not 0 <= self.wins <= self.episodes:
            raise ValueError(f"wins {self.wins} not within 0..{self.episodes}")

    @property
    def rate(self) -> float:
        return self.wins / self.episodes if self.episodes else 0.0


def fisher_exact(a: Pooled, b: Pooled) -> float:
    """Two-sided p-value of Fisher's exact test that `a` and `b` share one win rate."""
    total_wins = a.wins + b.wins
    total = a.episodes + b.episodes
    if total == 0 or total_wins in (0, total):
        return 1.0
    denominator = math.comb(total, total_wins)

    def probability(x: int) -> float:
        return math.comb(a.episodes, x) * math.comb(b.episodes, total_wins - x) / denominator

    observed = probability(a.wins)
    low, high = max(0, total_wins - b.episodes), min(a.episodes, total_wins)
    p = sum(q for q in (probability(x) for x in range(low, high + 1))
            if q <= observed * (1 + TIE_TOLERANCE))
    return min(1.0, p)


def pool(parts: Iterable[Pooled | None]) -> Pooled | None:
    """The wins and episodes of the parts that exist, summed (None when none does)."""
    present = [p for p in parts if p is not None]
    if not present:
        return None
    return Pooled(sum(p.wins for p in present), sum(p.episodes for p in present))


def fisher_or_none(a: Pooled | None, b: Pooled | None) -> float | None:
    """`fisher_exact(a, b)`, or None when a side is missing or has no episode."""
    if a is None or b is None or not a.episodes or not b.episodes:
        return None
    return fisher_exact(a, b)
