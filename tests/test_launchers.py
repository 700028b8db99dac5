"""Every server's launcher has one command line (`env.launch.launcher_main`): `start|stop --config
FILE [--set KEY=VALUE]...`; a config error is one line and exit code 2, never a traceback, and a
stop with nothing running is no error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHERS = ("env.alfworld.launch", "env.mind2web.launch", "env.retrieval.launcher")


def _launch(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("module", LAUNCHERS)
@pytest.mark.parametrize("override", ["nope.key=1", "retrieval.nope=1", "retrieval.port=0"])
def test_a_config_error_is_one_line_and_exit_2(module, override):
    done = _launch(module, "start", "--config", "configs/local_cpu.yaml", "--set", override)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and override.split("=")[0].split(".")[-1] in errors[0], done.stderr


@pytest.mark.parametrize("module", LAUNCHERS)
def test_stop_with_nothing_running_is_no_error(module, tmp_path):
    sets = [f"{section}.log_dir={tmp_path / section}"
            for section in ("alfworld", "mind2web", "retrieval")]
    done = _launch(module, "stop", "--config", "configs/local_cpu.yaml",
                   *(arg for value in sets for arg in ("--set", value)))
    assert done.returncode == 0, done.stderr
