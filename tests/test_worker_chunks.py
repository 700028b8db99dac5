"""tests/conftest.py `worker_chunks`: the longest tests lead each worker's first share."""

from __future__ import annotations

import pytest

from tests.conftest import worker_chunks


def _xdist_shares(n: int, workers: int) -> list[int]:
    """The sizes of work stealing's first hand-out (xdist 3.8.0 scheduler/worksteal.py:211-216)."""
    shares, left = [], n
    for worker in range(workers):
        shares.append(left // (workers - worker))
        left -= shares[-1]
    return shares


@pytest.mark.parametrize(("n", "workers", "n_long"), [(20, 3, 4), (21, 2, 3), (7, 3, 3),
                                                      (2, 3, 2), (30, 4, 0)])
def test_each_worker_starts_on_its_long_tests_and_nothing_is_lost(n, workers, n_long):
    items = [f"t{i}" for i in range(n)]
    longest = items[-n_long:] if n_long else []
    ordered = worker_chunks(items, workers, longest)
    assert sorted(ordered) == sorted(items)
    shares = _xdist_shares(n, workers)
    dealt = [longest[worker::workers] for worker in range(workers)]
    if all(share >= len(d) for share, d in zip(shares, dealt, strict=True)):  # else: any order
        starts = [sum(shares[:worker]) for worker in range(workers)]
        assert [ordered[s:s + len(d)] for s, d in zip(starts, dealt, strict=True)] == dealt
    rest = [item for item in ordered if item not in longest]
    assert rest == [item for item in items if item not in longest]  # the others keep their order
