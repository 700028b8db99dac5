"""Which game files a client may load: paths under the configured data root, nothing else.

Owns `resolve_game`. A client names a game by its path relative to the data root (the
`game.tw-pddl` file or its trial folder). Anything that resolves outside the root — `../`,
absolute paths, symlinks leading out — gets one fixed message, decided before the path is ever
tested for existence, so the answer never reveals what exists outside the root. A name inside
the root that no file can have (a part longer than the file system allows) is an unknown game
(404), like any name with no game behind it.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path

from env.wire import WireError

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
OUTSIDE = "must be the path of a game inside the data root, relative to it"


@dataclass(frozen=True)
class GameRef:
    """A validated game: its file, its key (path relative to the root) and its task type."""

    path: Path
    key: str
    task_type: str


def _outside() -> WireError:
    return WireError(400, "bad_game_path", f"game: {OUTSIDE}", "game")


def resolve_game(root: Path, name: str) -> GameRef:
    """Validate `name` against the resolved data `root` (raises `WireError`)."""
    if "\x00" in name or Path(name).is_absolute():
        raise _outside()
    candidate = (root / name).resolve()
    if candidate.name != GAME_FILE:
        candidate = (candidate / GAME_FILE).resolve()
    if not candidate.is_relative_to(root):
        raise _outside()
    if candidate.name != GAME_FILE or not _is_file(candidate):
        raise WireError(404, "unknown_game", f"no game at {name!r} in the data root", "game")
    return GameRef(candidate, str(candidate.relative_to(root)), _task_type(candidate.parent))


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False too for a name no file can have (a part over the file system's
    name limit: `ENAMETOOLONG`, which `is_file` raises): no game there, a 404 like any other."""
    try:
        return path.is_file()
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return False
        raise


def _task_type(folder: Path) -> str:
    try:
        data = json.loads((folder / TRAJ_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    value = data.get("task_type", "") if isinstance(data, dict) else ""
    return value if isinstance(value, str) else ""
