"""ALFWorld expert trajectories: the planner walkthrough a game file carries.

Owns `read_walkthrough` (the `walkthrough` list of a `game.tw-pddl`: the project's generator
writes the Fast Downward plan it proved there, `env/alfworld/generate.py`, and the official games
carry one too) and `game_file` (where a task row's `metadata.game` lies: a path relative to the
data root, the game file or its trial folder, as the env server resolves it). A game without a
walkthrough has no expert trajectory here: planning one needs the server side's planner
(`env.alfworld.planner`), which the trainer's layers do not import.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

GAME_FILE = "game.tw-pddl"


def game_file(data_root: str | Path, game: str) -> Path:
    """The game file that `metadata.game` names under `data_root`."""
    path = Path(data_root) / game
    return path if path.name == GAME_FILE else path / GAME_FILE


def read_walkthrough(path: Path) -> list[str] | None:
    """The game's walkthrough commands; None when the file is unreadable or has none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        logger.warning("no walkthrough: %s unreadable (%s)", path, error)
        return None
    walkthrough = data.get("walkthrough") if isinstance(data, dict) else None
    if (not isinstance(walkthrough, list) or not walkthrough
            or not all(isinstance(command, str) and command for command in walkthrough)):
        return None
    return list(walkthrough)
