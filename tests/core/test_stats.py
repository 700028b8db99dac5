"""Fisher's exact test against values computed by hand and by SciPy for the same tables."""

import pytest

from evolving_rl.core.stats import Pooled, fisher_exact


@pytest.mark.parametrize(("a", "b", "expected"), [
    # scipy.stats.fisher_exact([[4, 92], [9, 87]]) (the held-out 4/96 vs 9/96 of issue 21)
    ((4, 96), (9, 96), 0.2499988),
    # the lady tasting tea: 3/4 vs 1/4, p = 34/70
    ((3, 4), (1, 4), 34 / 70),
    ((10, 20), (10, 20), 1.0),
    ((0, 10), (10, 10), 2 / 184756),
])
def test_known_tables(a, b, expected):
    assert fisher_exact(Pooled(*a), Pooled(*b)) == pytest.approx(expected, rel=1e-3)


def test_symmetric_and_degenerate():
    a, b = Pooled(7, 64), Pooled(15, 64)
    assert fisher_exact(a, b) == pytest.approx(fisher_exact(b, a))
    assert fisher_exact(Pooled(0, 5), Pooled(0, 9)) == 1.0
    assert fisher_exact(Pooled(0, 0), Pooled(0, 0)) == 1.0


def test_wins_must_fit_the_episodes():
    with pytest.raises(ValueError):
        Pooled(5, 4)


def test_pool_sums_the_parts_that_exist():
    from evolving_rl.core.stats import pool

    assert pool([Pooled(2, 10), None, Pooled(3, 5)]) == Pooled(5, 15)
    assert pool([None, None]) is None


def test_fisher_or_none_needs_episodes_on_both_sides():
    from evolving_rl.core.stats import fisher_or_none

    assert fisher_or_none(Pooled(1, 4), None) is None
    assert fisher_or_none(Pooled(1, 4), Pooled(0, 0)) is None
    assert fisher_or_none(Pooled(2, 10), Pooled(3, 5)) == fisher_exact(Pooled(2, 10), Pooled(3, 5))
