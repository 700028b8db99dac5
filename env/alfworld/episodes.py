"""A worker's table of live episodes: ids, capacity, idle-TTL eviction, orphan-free resets.

Owns which episodes exist in one worker process. A reset first reserves a slot (capacity counts
live episodes and resets in flight; full → 503 + Retry-After), and the episode is registered only
if its client is still waiting for it — a reset that finishes after the client's deadline, or
after the client hung up, is dropped on the spot instead of holding memory until the idle TTL.
Ids are `<worker>-<boot>-<random>`: an id of another boot of this worker is "lost" (410); only
the router, which saw every boot, tells a forged boot (404) from a past one.

The admissible commands a client sees leave out the engine's `help` command, as the reference
servers' lists do (`help` stays playable, it is just not offered: small solvers wasted turns on it).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from env.alfworld.runtime import TASK_PREFIX, Episode
from env.alfworld.wire import EpisodeView, episode_worker, lost, unknown
from env.wire import WireError

UNLISTED_COMMANDS = frozenset({"help"})


@dataclass
class Slot:
    """One live episode and its bookkeeping."""

    episode: Episode
    game: str
    task_type: str
    task: str
    steps: int = 0
    last_used: float = field(default_factory=time.monotonic)

    def view(self, episode_id: str) -> EpisodeView:
        ep = self.episode
        listed = [command for command in ep.admissible if command not in UNLISTED_COMMANDS]
        return EpisodeView(episode_id=episode_id, observation=ep.observation,
                           admissible_commands=listed, won=ep.won, reward=ep.reward,
                           done=ep.won, steps=self.steps, task=self.task,
                           task_type=self.task_type, game=self.game)


def task_text(intro: str) -> str:
    """The task sentence of an ALFWorld intro ("Your task is to: …")."""
    _, _, rest = intro.rpartition(TASK_PREFIX)
    return rest.strip()


class EpisodeTable:
    """Live episodes of one worker (thread-safe)."""

    def __init__(self, worker_index: int, capacity: int, ttl_s: float,
                 retry_after_s: int) -> None:
        self.worker_index = worker_index
        self.boot = secrets.token_hex(4)
        self._capacity, self._ttl_s, self._retry_after_s = capacity, ttl_s, retry_after_s
        self._slots: dict[str, Slot] = {}
        self._reserved = 0
        self._lock = threading.Lock()
        self.evicted = 0
        self.dropped_resets = 0

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def reserved(self) -> int:
        return self._reserved

    def reserve(self) -> None:
        """Claim room for one reset, or raise 503 + Retry-After."""
        with self._lock:
            if len(self._slots) + self._reserved >= self._capacity:
                raise WireError(503, "worker_full", f"worker {self.worker_index} holds its "
                                f"capacity of {self._capacity} episodes; retry later",
                                retry_after_s=self._retry_after_s)
            self._reserved += 1

    def unreserve(self) -> None:
        with self._lock:
            self._reserved -= 1

    def admit(self, slot: Slot, still_wanted: bool) -> str | None:
        """Register a reserved episode if its client still waits; its id, or None if dropped."""
        with self._lock:
            self._reserved -= 1
            if not still_wanted:
                self.dropped_resets += 1
                return None
            episode_id = f"{self.worker_index}-{self.boot}-{secrets.token_hex(8)}"
            self._slots[episode_id] = slot
            return episode_id

    def get(self, episode_id: str) -> Slot:
        index, boot = episode_worker(episode_id)
        with self._lock:
            slot = self._slots.get(episode_id)
            if slot is not None:
                slot.last_used = time.monotonic()
                return slot
        if index == self.worker_index and boot != self.boot:
            raise lost(episode_id)
        raise unknown(episode_id)

    def pop(self, episode_id: str) -> Slot:
        slot = self.get(episode_id)
        with self._lock:
            self._slots.pop(episode_id, None)
        return slot

    def evict_idle(self) -> int:
        """Drop episodes idle longer than the TTL; how many were dropped."""
        cutoff = time.monotonic() - self._ttl_s
        with self._lock:
            stale = [eid for eid, slot in self._slots.items() if slot.last_used < cutoff]
            for eid in stale:
                del self._slots[eid]
            self.evicted += len(stale)
        return len(stale)
