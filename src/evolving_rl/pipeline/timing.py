"""Wall-clock accounting of waiting: how long the pipeline waited on each service.

Owns `IOClock`. Every awaited call to the policy, an env server or the retrieval server runs
inside `clock.wait(category)`. The clock keeps, per category and for all categories together,
the summed duration of calls and the *covered* time (the union of in-flight intervals, so
concurrent calls are not double counted). Pipeline overhead is then wall time minus the covered
time of all categories: the time during which the pipeline was the only thing working.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

CATEGORIES = ("policy", "env", "retrieval")
ALL = "any"


class IOClock:
    """Summed and covered waiting time per category (plus `ALL`); one per rollout."""

    def __init__(self) -> None:
        keys = (*CATEGORIES, ALL)
        self.summed_s = dict.fromkeys(keys, 0.0)
        self.covered_s = dict.fromkeys(keys, 0.0)
        self.calls = dict.fromkeys(keys, 0)
        self._in_flight = dict.fromkeys(keys, 0)
        self._since = dict.fromkeys(keys, 0.0)

    def _enter(self, key: str, now: float) -> None:
        if self._in_flight[key] == 0:
            self._since[key] = now
        self._in_flight[key] += 1
        self.calls[key] += 1

    def _exit(self, key: str, now: float, started: float) -> None:
        self._in_flight[key] -= 1
        self.summed_s[key] += now - started
        if self._in_flight[key] == 0:
            self.covered_s[key] += now - self._since[key]

    @contextmanager
    def wait(self, category: str) -> Iterator[None]:
        """Account the enclosed await as waiting on `category`."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown wait category {category!r}")
        started = time.perf_counter()
        self._enter(category, started)
        self._enter(ALL, started)
        try:
            yield
        finally:
            now = time.perf_counter()
            self._exit(category, now, started)
            self._exit(ALL, now, started)

    def metrics(self, wall_s: float) -> dict[str, float]:
        """Timing metrics of a finished rollout that took `wall_s` seconds."""
        out = {"timing/wall_s": wall_s}
        for key in CATEGORIES:
            out[f"timing/{key}_wait_covered_s"] = self.covered_s[key]
            out[f"timing/{key}_wait_summed_s"] = self.summed_s[key]
            out[f"timing/{key}_calls"] = float(self.calls[key])
        overhead = max(0.0, wall_s - self.covered_s[ALL])
        out["timing/overhead_s"] = overhead
        out["timing/overhead_fraction"] = overhead / wall_s if wall_s > 0 else 0.0
        return out
