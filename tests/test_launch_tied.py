"""Servers a job spawns `tied_to_this_process()` end when the job is killed outright; servers
spawned outside the block (a launcher's `start`) outlive their spawner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

ROOT = Path(__file__).resolve().parents[1]
PARENT = """
import sys, time
from env.launch import spawn_server, tied_to_this_process
cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
if sys.argv[1] == "tied":
    with tied_to_this_process():
        child = spawn_server(cmd, sys.argv[2])
else:
    child = spawn_server(cmd, sys.argv[2])
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def _spawn_then_kill_parent(mode: str, tmp_path: Path) -> int:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode, str(tmp_path / "s.log")],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    return child


def test_a_tied_server_ends_with_its_killed_job(tmp_path):
    child = _spawn_then_kill_parent("tied", tmp_path)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_an_untied_server_outlives_its_spawner(tmp_path):
    child = _spawn_then_kill_parent("free", tmp_path)
    try:
        time.sleep(0.5)
        assert _alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


SERVING = """
import sys, time
from env.launch import job_serving, spawn_server, stop_process
procs = []

def start(_cfg):
    procs.append(spawn_server([sys.executable, "-c", "import time; time.sleep(60)"], sys.argv[1]))

def stop(_cfg):
    stop_process(procs[0])
    open(sys.argv[2], "w").write("stopped")

with job_serving(None, start, stop):
    print(procs[0].pid, flush=True)
    time.sleep(60)
"""


def test_a_terminated_job_stops_its_servers_itself(tmp_path):
    """SIGTERM (what `kill` and a timeout send) runs the job's stop: the benchmarks and the main
    job serve with `job_serving`/`stopped_on_sigterm`. The PID is printed inside the block, so
    the signal lands while serving (a signal during `start` is the kernel's: the tied server
    ends with the job)."""
    marker = tmp_path / "stopped"
    parent = subprocess.Popen([sys.executable, "-c", SERVING, str(tmp_path / "s.log"),
                               str(marker)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=20) != 0
    assert marker.read_text() == "stopped" and not _alive(child)
