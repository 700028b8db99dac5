"""The live episodes of one env server process, for every environment: ids, capacity, idle-TTL
eviction, resets that leave no orphan.

Owns `EpisodeTable` and `housekeep`. Capacity counts live episodes and resets in flight (full:
503 + Retry-After). A slow reset first `reserve`s a slot and its episode is `admit`ted only if its
client still waits — one finished after the client's deadline, or after the client hung up, is
dropped on the spot instead of holding memory until the idle TTL; a quick one is `add`ed at once.
`get` refreshes an episode's idle clock; `evict_idle` drops those idle past the TTL, which
`housekeep` runs periodically. Ids are random hex and an unknown one is 404 `unknown_episode`; an
environment that encodes more in its ids (ALFWorld: worker and boot) overrides `_new_id` and
`_missing`.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from env.wire import WireError, unknown_episode

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    episode: T
    last_used: float = field(default_factory=time.monotonic)


class EpisodeTable(Generic[T]):
    """Live episodes of one process (thread-safe); `holder` and `full_code` name it in a 503."""

    def __init__(self, capacity: int, ttl_s: float, retry_after_s: int, *,
                 holder: str = "the server", full_code: str = "server_full") -> None:
        self.capacity, self.ttl_s, self.retry_after_s = capacity, ttl_s, retry_after_s
        self._holder, self._full_code = holder, full_code
        self._entries: dict[str, _Entry[T]] = {}
        self._reserved = 0
        self._lock = threading.Lock()
        self.evicted = 0
        self.dropped_resets = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def reserved(self) -> int:
        return self._reserved

    def _check_room(self) -> None:
        """Raise 503 + Retry-After when full (caller holds the lock)."""
        if len(self._entries) + self._reserved >= self.capacity:
            raise WireError(503, self._full_code, f"{self._holder} holds its capacity of "
                            f"{self.capacity} episodes; retry later",
                            retry_after_s=self.retry_after_s)

    def _register(self, episode: T) -> str:
        episode_id = self._new_id()
        self._entries[episode_id] = _Entry(episode)
        return episode_id

    def add(self, episode: T) -> str:
        """Register `episode` now, or raise 503 when full; its id."""
        with self._lock:
            self._check_room()
            return self._register(episode)

    def reserve(self) -> None:
        """Claim room for one slow reset, or raise 503 + Retry-After."""
        with self._lock:
            self._check_room()
            self._reserved += 1

    def unreserve(self) -> None:
        with self._lock:
            self._reserved -= 1

    def admit(self, episode: T, still_wanted: bool) -> str | None:
        """Register a reserved episode if its client still waits; its id, or None if dropped."""
        with self._lock:
            self._reserved -= 1
            if not still_wanted:
                self.dropped_resets += 1
                return None
            return self._register(episode)

    def get(self, episode_id: str) -> T:
        with self._lock:
            entry = self._entries.get(episode_id)
            if entry is not None:
                entry.last_used = time.monotonic()
                return entry.episode
        raise self._missing(episode_id)

    def pop(self, episode_id: str) -> T:
        episode = self.get(episode_id)
        with self._lock:
            self._entries.pop(episode_id, None)
        return episode

    def evict_idle(self) -> int:
        """Drop episodes idle longer than the TTL; how many were dropped."""
        cutoff = time.monotonic() - self.ttl_s
        with self._lock:
            stale = [eid for eid, entry in self._entries.items() if entry.last_used < cutoff]
            for eid in stale:
                del self._entries[eid]
            self.evicted += len(stale)
        return len(stale)

    def _new_id(self) -> str:
        return secrets.token_hex(12)

    def _missing(self, episode_id: str) -> WireError:
        return unknown_episode(episode_id)


def housekeep(table: EpisodeTable, stop: threading.Event,
              go_on: Callable[[], bool] = lambda: True) -> None:
    """Evict `table`'s idle episodes every quarter TTL (0.2 s to 5 s) until `stop` is set or
    `go_on()` (asked after each pass) is False: a server's housekeeping thread."""
    period = max(0.2, min(table.ttl_s / 4, 5.0))
    while not stop.wait(period):
        evicted = table.evict_idle()
        if evicted:
            logger.info("evicted %d idle episodes", evicted)
        if not go_on():
            return
