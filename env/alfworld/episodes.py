"""A worker's live episodes: the slot each holds and the ids they go by.

Owns what an ALFWorld episode is in one worker process (`Slot`, its view) and the worker's table
of them, `WorkerEpisodes`: the servers' one episode table (`env.episodes`: capacity, idle-TTL
eviction, orphan-free resets) with ids `<worker>-<boot>-<random>`: an id of another boot of this
worker is "lost" (410); only the router, which saw every boot, tells a forged boot (404) from a
past one.

The admissible commands a client sees leave out the engine's `help` command, as the reference
servers' lists do (`help` stays playable, it is just not offered: small solvers wasted turns on it).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from env.alfworld.runtime import TASK_PREFIX, Episode
from env.alfworld.wire import EpisodeView, episode_worker, lost
from env.episodes import EpisodeTable
from env.wire import WireError, unknown_episode

UNLISTED_COMMANDS = frozenset({"help"})


@dataclass
class Slot:
    """One live episode and its bookkeeping."""

    episode: Episode
    game: str
    task_type: str
    task: str
    steps: int = 0

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


class WorkerEpisodes(EpisodeTable[Slot]):
    """A worker's live episodes (`env.episodes.EpisodeTable`) under ids naming the worker and
    this boot: an id of another boot of this worker is lost (410), any other unknown (404)."""

    def __init__(self, worker_index: int, capacity: int, ttl_s: float,
                 retry_after_s: int) -> None:
        super().__init__(capacity, ttl_s, retry_after_s, holder=f"worker {worker_index}",
                         full_code="worker_full")
        self.worker_index = worker_index
        self.boot = secrets.token_hex(4)

    def _new_id(self) -> str:
        return f"{self.worker_index}-{self.boot}-{secrets.token_hex(8)}"

    def _missing(self, episode_id: str) -> WireError:
        index, boot = episode_worker(episode_id)
        if index == self.worker_index and boot != self.boot:
            return lost(episode_id)
        return unknown_episode(episode_id)
