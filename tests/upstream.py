"""Where the tests find slime and Megatron-LM at the project's pins, and what happens without them.

slime: the `slime/` submodule when it is checked out, else the folder named by
$EVOLVING_RL_SLIME_PATH. Megatron-LM (the commit slime's docker/Dockerfile checks out, with slime's
patches applied as that Dockerfile does): $EVOLVING_RL_MEGATRON_PATH, a folder holding its
`megatron/` package. `.ci/run` sets both to `../shared/upstream/...` when they are unset. SGLang
and the packages its import needs: the overlay of scripts/upstream_overlay.sh
($EVOLVING_RL_UPSTREAM_OVERLAY, default <venv>/upstream-overlay). Without them a test skips,
except on CI (`CI` set), where it fails with a message saying what to set: upstream compatibility
must be checked on every commit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLIME_PATH_VAR = "EVOLVING_RL_SLIME_PATH"
MEGATRON_PATH_VAR = "EVOLVING_RL_MEGATRON_PATH"
OVERLAY_VAR = "EVOLVING_RL_UPSTREAM_OVERLAY"
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"  # the submodule's pin
MEGATRON_COMMIT = "1dcf0dafa884ad52ffb243625717a3471643e087"  # slime docker/Dockerfile:7


def _missing(what: str) -> None:
    """Skip for want of an upstream source; fail instead on CI."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the upstream tests, but {what} (.ci/run sets "
                    f"{SLIME_PATH_VAR} / {MEGATRON_PATH_VAR} to ../shared/upstream/...)",
                    pytrace=False)
    pytest.skip(what)


def _from_env(var: str, marker: str) -> Path | None:
    value = os.environ.get(var)
    return Path(value).resolve() if value and (Path(value) / marker).is_file() else None


def find_slime() -> Path | None:
    """slime's source tree at the pin, if this machine has it."""
    if (ROOT / "slime/slime/utils/types.py").is_file():
        return ROOT / "slime"
    return _from_env(SLIME_PATH_VAR, "slime/utils/types.py")


def find_megatron() -> Path | None:
    """The folder holding the patched `megatron/` package, if this machine has it."""
    return _from_env(MEGATRON_PATH_VAR, "megatron/training/arguments.py")


def overlay_dir() -> Path:
    """The overlay scripts/upstream_overlay.sh installs SGLang into; skips (fails on CI) when
    absent."""
    folder = Path(os.environ.get(OVERLAY_VAR) or Path(sys.prefix) / "upstream-overlay")
    return _required(folder if (folder / ".pins").is_file() else None,
                     f"no upstream overlay at {folder} (bash scripts/upstream_overlay.sh)")


def put_on_path(folder: Path | None) -> None:
    """Make a source tree importable (first on `sys.path`), as slime's runtime env does."""
    if folder is not None and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _required(found: Path | None, what: str) -> Path:
    if found is None:
        _missing(what)
    return found


def slime_dir() -> Path:
    """slime's source tree; skips (fails on CI) when absent."""
    return _required(find_slime(), f"slime's sources are absent (no checked-out slime/ "
                     f"submodule, {SLIME_PATH_VAR}={os.environ.get(SLIME_PATH_VAR, '')!r})")


def megatron_dir() -> Path:
    """The patched Megatron-LM's source folder; skips (fails on CI) when absent."""
    return _required(find_megatron(), f"Megatron-LM's sources are absent "
                     f"({MEGATRON_PATH_VAR}={os.environ.get(MEGATRON_PATH_VAR, '')!r})")


def bytecode_env() -> dict[str, str]:
    """What a child importing upstream code sets about bytecode: nothing when the suite keeps it
    in one folder (PYTHONPYCACHEPREFIX, scripts/test.sh: nothing is written beside slime's or the
    overlay's sources, and a later child reads what an earlier one compiled), else no bytecode at
    all, so that no __pycache__ appears in a slime checkout."""
    return {} if os.environ.get("PYTHONPYCACHEPREFIX") else {"PYTHONDONTWRITEBYTECODE": "1"}
