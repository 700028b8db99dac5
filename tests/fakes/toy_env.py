"""In-memory fakes of the env and retrieval clients for fast unit tests of the pipeline.

Not named `env`: a spawn child whose path holds tests/fakes (pytest given a file of this folder)
would import it as the top-level `env` package and die unpickling its job (2026-12-07).

`FakeEnvClient` plays a toy ALFWorld-like game (same JSON as the real router): the task is won
by sending `goal_action`; `fail_after` makes every call after that many fail with a transport
error (an env server dying). `FakeRetrievalClient` returns catalog tasks by id order, honouring
exclusions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from evolving_rl.clients.http import TransportError
from evolving_rl.clients.retrieval import RetrievedTask, SearchQuery

INTRO = ("You are in the middle of a room. Looking quickly around you, you see a desk 1 and "
         "a shelf 1.\n\nYour task is to: {goal}")
ACTIONS = ["go to desk 1", "go to shelf 1", "look", "take mug 1 from desk 1"]


class FakeEnvClient:
    """Toy game server answering like the ALFWorld router."""

    def __init__(self, goal_action: str = "take mug 1 from desk 1",
                 fail_after: int | None = None) -> None:
        self.goal_action = goal_action
        self.fail_after = fail_after
        self.calls = 0
        self.open: set[str] = set()
        self.closed: list[str] = []
        self.actions: list[str] = []
        self._ids = itertools.count()

    def _tick(self) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise TransportError("fake env: connection refused")

    async def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        self._tick()
        episode_id = f"ep{next(self._ids)}"
        self.open.add(episode_id)
        return {"episode_id": episode_id, "admissible_commands": ACTIONS,
                "observation": INTRO.format(goal=body["game"]), "done": False, "won": False,
                "reward": 0.0}

    async def step(self, episode_id: str, action: str) -> dict[str, Any]:
        self._tick()
        self.actions.append(action)
        won = action == self.goal_action
        text = "You take the mug 1." if won else (
            "Nothing happens." if action not in ACTIONS else "You arrive somewhere.")
        return {"observation": text, "admissible_commands": ACTIONS, "done": won, "won": won,
                "reward": float(won)}

    async def close_episode(self, episode_id: str) -> dict[str, Any]:
        self.closed.append(episode_id)
        self.open.discard(episode_id)
        return {"closed": True}

    async def close(self) -> None:
        """Nothing to release."""


class FakeRetrievalClient:
    """Returns the first k catalog ids not excluded, for every query."""

    def __init__(self, ids: Sequence[str], fail: bool = False) -> None:
        self.ids = list(ids)
        self.fail = fail
        self.requests: list[tuple[list[SearchQuery], int]] = []
        self.options: list[dict[str, Any]] = []  # split, order of each request

    async def search(self, queries: Sequence[SearchQuery], k: int,
                     **options: Any) -> list[list[RetrievedTask]]:
        self.requests.append((list(queries), k))
        self.options.append(options)
        if self.fail:
            raise TransportError("fake retrieval: connection refused")
        return [[RetrievedTask(i, i, "toy", 1.0) for i in self.ids
                 if i not in query.exclude_ids][:k] for query in queries]

    async def close(self) -> None:
        """Nothing to release."""
