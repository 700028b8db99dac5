"""Proof of solvability for generated ALFWorld games: plan once, then replay in the real engine.

Owns the two engine calls the generator makes per game. `plan_walkthrough` asks the Fast
Downward planner (package `fast-downward-textworld`) for a plan the way TextWorld's `PddlEnv`
does it — requesting the `walkthrough` extra on reset makes `PddlEnv` call
`PddlState.replan`, and alfworld's `AlfredDemangler` gives the plan steps their in-game names
("apple 1"). `replay` then loads the written `game.tw-pddl` exactly as alfworld's `AlfredTWEnv`
does (`textworld.start`'s steps with `AlfredDemangler` + `AlfredInfos`, `won` and admissible
commands requested; the `PddlEnv` backend named, never guessed from the path), checks every
step is admissible and reports whether the game ends won (`play` does the same for a policy that
picks each command from the admissible ones). alfworld's handcoded expert is not used: in 0.4.2
it still issues "put" after the rename to "move" and wins pick_two_obj_and_place only by chance.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from textworld.envs import PddlEnv


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of replaying a walkthrough: won, steps taken, first inadmissible command."""

    won: bool
    steps: int
    rejected: str | None = None


@contextmanager
def _argv_kept() -> Iterator[None]:
    """Loading a PDDL game overwrites `sys.argv` (Fast Downward's option parser)."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


def plan_walkthrough(game: dict) -> list[str]:
    """A winning command sequence for the game data, from Fast Downward; [] if none found."""
    infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["walkthrough"])
    env = AlfredDemangler(PddlEnv(infos), shuffle=False)
    with _argv_kept():
        env.load(dict(game, walkthrough=None))
        state = env.reset()
    env.close()
    return list(state["extra.walkthrough"] or [])


def _start(game_path: str) -> tuple[object, dict]:
    """The game loaded as `textworld.start` loads it, with the backend named instead of
    guessed from the path (TextWorld takes any path holding `.z1`-`.z8`, a data root's
    name included, for a Z-machine game)."""
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env = PddlEnv(infos)
    for wrapper in (AlfredDemangler(shuffle=False), AlfredInfos):
        env = wrapper(env)
    with _argv_kept():
        env.load(game_path)
        return env, env.reset()


def play(game_path: str, choose: Callable[[list[str]], str], max_steps: int) -> ReplayResult:
    """Play up to `max_steps` commands, each `choose(admissible commands)`; won and steps."""
    env, state = _start(game_path)
    try:
        for step in range(max_steps):
            state, _, done = env.step(choose(list(state["admissible_commands"])))
            if done:
                return ReplayResult(bool(state["won"]), step + 1)
        return ReplayResult(False, max_steps)
    finally:
        env.close()


def replay(game_path: str, walkthrough: list[str]) -> ReplayResult:
    """Play `walkthrough` in the game file as AlfredTWEnv loads it; stop at the first bad step."""
    env, state = _start(game_path)
    try:
        for step, command in enumerate(walkthrough):
            if command not in state["admissible_commands"]:
                return ReplayResult(False, step, command)
            state, _, done = env.step(command)
            if done:
                return ReplayResult(bool(state["won"]), step + 1)
        return ReplayResult(bool(state["won"]), len(walkthrough))
    finally:
        env.close()
