"""The ALFWorld servers' HTTP wire: typed requests and responses and their validation.

Owns what router and worker both accept and answer, on the env servers' shared wire (`env.wire`:
`WireError`, bodies, string fields, JSON errors): every client mistake is a `WireError`, so
nothing a client sends reaches the engine unvalidated. Episode ids name their worker and its boot
(`<worker>-<boot>-<hex>`), so the router routes without a table and an id from a worker that
has since restarted is "episode lost".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from env.wire import WireError, bad_field, string_field, unknown_episode

MAX_ACTION_CHARS = 1000
MAX_GAME_CHARS = 1024
# A reset's deadline (`timeout_s`): at least 10 ms, a few times a warm reset (a game in the
# translation cache) through the router on loopback (median 2.7 ms, 34 of 35 met in 10 ms on a
# 2-CPU machine, 2026-12-05), so that an accepted deadline can be met; a smaller one is a 400,
# never a 503 that an obedient client would retry forever.
MIN_RESET_TIMEOUT_S = 0.01
MAX_RESET_TIMEOUT_S = 3600
# ASCII digits only (`\d` would take any Unicode digit) and matched whole (`$` would take a
# trailing newline): anything else is no id of ours, so 404, never 410 "lost".
EPISODE_ID = re.compile(r"([0-9]{1,4})-([0-9a-f]{8})-([0-9a-f]{16})", re.ASCII)


def lost(episode_id: str) -> WireError:
    return WireError(410, "episode_lost", f"episode {episode_id} was lost: its worker restarted "
                     "(start a new episode)", "episode_id")


def _episode_id(body: dict[str, Any]) -> str:
    value = string_field(body, "episode_id", 64)
    if not EPISODE_ID.fullmatch(value):
        raise unknown_episode(value)
    return value


def episode_worker(episode_id: str) -> tuple[int, str]:
    """(worker index, worker boot) encoded in a validated episode id."""
    match = EPISODE_ID.fullmatch(episode_id)
    assert match is not None  # ids reach here validated
    return int(match.group(1)), match.group(2)


@dataclass(frozen=True)
class ResetRequest:
    """Start an episode of `game` (path relative to the data root); `timeout_s`: the client's
    deadline — an episode ready after it is dropped, never left orphaned."""

    game: str
    timeout_s: float | None = None

    @classmethod
    def parse(cls, body: dict[str, Any]) -> ResetRequest:
        timeout = body.get("timeout_s")
        if timeout is not None and (isinstance(timeout, bool) or
                                    not isinstance(timeout, (int, float)) or
                                    not MIN_RESET_TIMEOUT_S <= timeout <= MAX_RESET_TIMEOUT_S):
            raise bad_field("timeout_s", f"must be a number of seconds in "
                            f"[{MIN_RESET_TIMEOUT_S}, {MAX_RESET_TIMEOUT_S}]")
        return cls(string_field(body, "game", MAX_GAME_CHARS), timeout)


def deadline_passed() -> WireError:
    """The router's answer when a reset's deadline ran out before any worker could start it
    (every worker tried was full): no episode, and no 503 to retry with the same deadline."""
    return WireError(408, "reset_abandoned", "the reset's deadline ran out before a worker "
                     "could start it; no episode was kept", "timeout_s")


@dataclass(frozen=True)
class StepRequest:
    episode_id: str
    action: str

    @classmethod
    def parse(cls, body: dict[str, Any]) -> StepRequest:
        return cls(_episode_id(body), string_field(body, "action", MAX_ACTION_CHARS))


@dataclass(frozen=True)
class CloseRequest:
    episode_id: str

    @classmethod
    def parse(cls, body: dict[str, Any]) -> CloseRequest:
        return cls(_episode_id(body))


@dataclass(frozen=True)
class EpisodeView:
    """What reset and step answer; every field is described in docs/design.md §7.1."""

    episode_id: str
    observation: str
    admissible_commands: list[str]
    won: bool
    reward: float
    done: bool
    steps: int
    task: str
    task_type: str
    game: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
