"""Turns at one shared model: the request with the least work left goes next.

Owns `Turns`, the retrieval encoder's lock. `threading.Lock` makes no promise of order: a thread
that releases it and asks again at once (a large request going on to its next batch) usually
gets it back before a thread that has waited all along, so one large request held the model for
its whole length (a one-query search waited 14-29 s behind two 256-query requests). Here each
batch is a turn, and of the threads waiting, the one whose request has the fewest tokens left
to encode takes the next turn (ties: the first to ask). A small request therefore waits for the
batch running now, and for smaller requests only; large requests share the model between them,
the one nearer its end first.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from collections.abc import Iterator


class Turns:
    """A lock granted to the waiter with the least work left (see module docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._held = False
        self._waiting: list[tuple[int, int]] = []  # heap of (work left, arrival)
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Threads waiting for a turn now."""
        return len(self._waiting)

    @contextlib.contextmanager
    def turn(self, work_left: int) -> Iterator[None]:
        """Hold the lock for one turn, queued by `work_left` (the request's work still to do,
        this turn's included)."""
        with self._changed:
            entry = (work_left, next(self._arrivals))
            heapq.heappush(self._waiting, entry)
            self._changed.wait_for(lambda: not self._held and self._waiting[0] == entry)
            heapq.heappop(self._waiting)
            self._held = True
        try:
            yield
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()
