"""Live Mind2Web episodes: replaying one task step by step, and the table that holds them.

Owns episode state and the two modes. "train" (the reference's environment) ends the episode at
the first wrong step; "eval" is teacher-forced: a wrong step is recorded and the episode moves on
along the gold path, so every step is scored (MindAct's step metrics). An episode is won when it
is done and every step was correct; a step is judged under the episode's empty-positive rule
(`env.mind2web.validate`). The table bounds live episodes (full -> 503 + Retry-After),
evicts episodes idle longer than the TTL, and names episodes by random ids.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from env.mind2web.store import TaskKey, TaskStore
from env.mind2web.validate import Action, Result, judge
from env.wire import WireError
from evolving_rl.domains.mind2web_metrics import STANDARD

MODES = ("train", "eval")


@dataclass
class Episode:
    """One replay of one task; `step` is the index of the step to act on now."""

    key: TaskKey
    mode: str
    rule: str = STANDARD
    step: int = 0
    steps_correct: int = 0
    done: bool = False
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def act(self, store: TaskStore, action: Action) -> Result:
        """Judge `action` on the current step and advance (caller holds `lock`)."""
        task = store.task(self.key)
        result = judge(task.steps[self.step].gold, store.snapshot(self.key, self.step), action,
                       self.rule)
        self.steps_correct += int(result.correct)
        if result.correct or self.mode == "eval":
            self.step += 1
        self.done = self.step >= len(task.steps) or not result.correct and self.mode == "train"
        return result

    def view(self, store: TaskStore, episode_id: str) -> dict[str, Any]:
        """The episode view of the wire contract."""
        task = store.task(self.key)
        n_steps = len(task.steps)
        observation = "" if self.done else store.snapshot(self.key, self.step).text
        return {"episode_id": episode_id, "task_id": task.annotation_id,
                "task": task.confirmed_task, "website": task.website, "domain": task.domain,
                "subdomain": task.subdomain, "step": self.step, "n_steps": n_steps,
                "observation": observation,
                "previous_actions": list(task.action_reprs[:min(self.step, n_steps)]),
                "done": self.done, "won": self.done and self.steps_correct == n_steps,
                "steps_correct": self.steps_correct}


def result_json(result: Result) -> dict[str, Any]:
    return asdict(result)


class EpisodeTable:
    """Live episodes (thread-safe): capacity, idle TTL, ids."""

    def __init__(self, capacity: int, ttl_s: float, retry_after_s: int) -> None:
        self._capacity, self._ttl_s, self._retry_after_s = capacity, ttl_s, retry_after_s
        self._episodes: dict[str, Episode] = {}
        self._lock = threading.Lock()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._episodes)

    def add(self, episode: Episode) -> str:
        with self._lock:
            if len(self._episodes) >= self._capacity:
                raise WireError(503, "server_full", f"the server holds its capacity of "
                                f"{self._capacity} episodes; retry later",
                                retry_after_s=self._retry_after_s)
            episode_id = secrets.token_hex(12)
            self._episodes[episode_id] = episode
            return episode_id

    def get(self, episode_id: str) -> Episode:
        with self._lock:
            episode = self._episodes.get(episode_id)
            if episode is None:
                raise WireError(404, "unknown_episode", "no such episode (closed, evicted "
                                "after its idle TTL, or never existed)", "episode_id")
            episode.last_used = time.monotonic()
            return episode

    def pop(self, episode_id: str) -> Episode:
        episode = self.get(episode_id)
        with self._lock:
            self._episodes.pop(episode_id, None)
        return episode

    def evict_idle(self) -> int:
        """Drop episodes idle longer than the TTL; how many were dropped."""
        cutoff = time.monotonic() - self._ttl_s
        with self._lock:
            stale = [eid for eid, ep in self._episodes.items() if ep.last_used < cutoff]
            for eid in stale:
                del self._episodes[eid]
            self.evicted += len(stale)
        return len(stale)
