"""Turns at one shared model: the request with the least work left goes next.

Owns `Turns`, the retrieval encoder's lock. `threading.Lock` makes no promise of order: a thread
that releases it and asks again at once (a large request going on to its next batch) usually
gets it back before a thread that has waited all along, so one large request held the model for
its whole length (a one-query search waited 14-29 s behind two 256-query requests). Here each
batch is a turn, and of the threads waiting, the one whose request has the fewest tokens left
to encode takes the next turn (ties: the first to ask). A small request therefore waits for the
batch running now, and for smaller requests only; large requests share the model between them,
the one nearer its end first. `close` refuses every turn not yet granted (the waiters are woken
and raise `TurnsClosed` at once, as do later callers; the turn held now runs on) and
`wait_idle` waits for the turn held now: a stopping server answers every request waiting for the
model at once instead of after the batches before it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from collections.abc import Iterator


class TurnsClosed(RuntimeError):
    """No more turns: `Turns.close` was called."""


class Turns:
    """A lock granted to the waiter with the least work left (see module docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._held = False
        self._closed = False
        self._waiting: list[tuple[int, int]] = []  # heap of (work left, arrival)
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Threads waiting for a turn now."""
        return len(self._waiting)

    @contextlib.contextmanager
    def turn(self, work_left: int) -> Iterator[None]:
        """Hold the lock for one turn, queued by `work_left` (the request's work still to do,
        this turn's included); `TurnsClosed` once `close` is called, waiting or not."""
        with self._changed:
            if self._closed:
                raise TurnsClosed("closed")
            entry = (work_left, next(self._arrivals))
            heapq.heappush(self._waiting, entry)
            self._changed.wait_for(
                lambda: self._closed or (not self._held and self._waiting[0] == entry))
            if self._closed:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
                raise TurnsClosed("closed while waiting")
            heapq.heappop(self._waiting)
            self._held = True
        try:
            yield
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()

    def close(self) -> None:
        """Refuse every turn not granted yet (waiters raise `TurnsClosed` now); the turn held
        now runs on."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_idle(self) -> None:
        """Wait until no turn is held (after `close`: none ever will be again)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._held)
