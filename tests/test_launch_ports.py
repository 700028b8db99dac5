"""Port helpers of env/launch.py (env/ports.py): consecutive free blocks for a router and its
workers, picked outside the kernel's ephemeral range and never handed to two processes; a start on
a port another server holds is refused, a health wait takes only the process it started for
healthy, and a start interrupted while it waits stops that process."""

from __future__ import annotations

import http.server
import json
import os
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from env import launch, ports
from env.launch import (
    LaunchError,
    free_port,
    free_port_block,
    spawn_server,
    start_server,
    stop_process,
    wait_for_health,
)


def test_block_is_free_and_avoids_excluded_ports():
    base = free_port_block(4)
    for port in range(base, base + 4):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # raises if taken
    other = free_port(exclude=range(base, base + 4))
    assert other not in range(base, base + 4)
    again = free_port_block(3, exclude={base, base + 1, base + 2, base + 3})
    assert not set(range(again, again + 3)) & set(range(base, base + 4))


CLAIM_IN_CHILD = """
import random, sys
from env import ports
ports._rng = random.Random(7)
print(ports.free_port(), flush=True)
sys.stdin.read()
"""


def test_ports_come_from_outside_the_kernels_ephemeral_range():
    """Where outgoing connections' source ports and bind(0) land: a port picked there can be
    taken by any connection before the server binds it."""
    low, high = (int(v) for v in
                 Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    picked = [free_port() for _ in range(20)] + [free_port_block(3) + 2 for _ in range(10)]
    assert not [port for port in picked if low <= port <= high]


def test_a_port_claimed_by_another_process_is_not_handed_out(monkeypatch):
    """The child and this process draw the same first port; only the child gets it, until it
    exits."""
    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen([sys.executable, "-c", CLAIM_IN_CHILD], cwd=root, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        theirs = int(child.stdout.readline())
        monkeypatch.setattr(ports, "_rng", random.Random(7))
        ours = free_port()
    finally:
        child.communicate("", timeout=30)
    assert ours != theirs
    monkeypatch.setattr(ports, "_rng", random.Random(7))
    assert free_port() == theirs  # the child's claim ended with it
    monkeypatch.setattr(ports, "_rng", random.Random(7))
    assert free_port() not in (ours, theirs)  # both claimed by this process now


def test_block_skips_a_taken_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        for _ in range(20):
            base = free_port_block(3)
            assert taken not in range(base, base + 3)


class Healthy(http.server.BaseHTTPRequestHandler):
    """A healthy server of another process (this test's): its `/health` names its own PID."""

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        body = json.dumps({"status": "ok", "pid": os.getpid()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def other_server():
    """The port of a healthy server that is not the process a test starts."""
    other = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    yield other.server_address[1]
    other.shutdown()
    other.server_close()


def test_start_refuses_a_port_another_server_holds(tmp_path, other_server):
    """Without the check, the other server's health answer would pass for ours."""
    port = other_server
    with pytest.raises(LaunchError, match=f"port {port} of 127.0.0.1 is in use"):
        start_server([sys.executable, "-c", "pass"], f"http://127.0.0.1:{port}/health",
                     tmp_path / "log.txt", timeout_s=5)


def test_health_wait_takes_only_the_process_it_started(other_server):
    """The port check before a start races a start beside it: the wait itself must tell our
    process from another server on the port (its PID in the health answer)."""
    url = f"http://127.0.0.1:{other_server}/health"
    ours = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        with pytest.raises(LaunchError, match=f"pid {os.getpid()} answers there, not pid "
                                              f"{ours.pid} we started"):
            wait_for_health(url, 1.0, ours, poll_s=0.05)
        ours.stdin.close()
        ours.wait(30)
        with pytest.raises(LaunchError, match="exited with code 0"):
            wait_for_health(url, 30.0, ours)
    finally:
        ours.kill()
        ours.wait()
    wait_for_health(url, 5.0)  # asked for any server: this one is healthy


def test_a_server_that_exits_at_start_is_named_with_its_last_line(tmp_path):
    """Not only "see <log>": the line a refusing server wrote last (issue 60, item 8); an
    earlier run's lines in the same log are never taken for it."""
    log = tmp_path / "server.log"
    log.write_text("an earlier run's last line\n")
    code = ("import sys; print('indexing tasks'); "
            "print('ERROR error: data/train/a.json:3: invalid JSON', file=sys.stderr); "
            "sys.exit(2)")
    with pytest.raises(LaunchError) as refused:
        start_server([sys.executable, "-c", code], f"http://127.0.0.1:{free_port()}/health",
                     log, timeout_s=60)
    assert str(refused.value).startswith("server exited with code 2 before ")
    assert str(refused.value).endswith(
        ": ERROR error: data/train/a.json:3: invalid JSON; see " + str(log))
    silent, port = tmp_path / "silent.log", free_port()
    with pytest.raises(LaunchError) as quiet:
        start_server([sys.executable, "-c", "raise SystemExit(2)"],
                     f"http://127.0.0.1:{port}/health", silent, timeout_s=60)
    assert str(quiet.value) == (f"server exited with code 2 before http://127.0.0.1:{port}/health "
                                f"was up; see {silent}")


def test_a_start_interrupted_while_waiting_stops_the_process_it_started(tmp_path, monkeypatch):
    """A test's timeout (pytest-timeout raises `Failed` in the wait) once left a fixture's
    retrieval server running for 90 minutes after the run (issue 61 §5)."""
    started = []

    def spawn(cmd, log_path, env=None):
        started.append(spawn_server(cmd, log_path, env))
        return started[-1]

    def timed_out(url, timeout_s, proc):
        raise pytest.fail.Exception("Timeout >300.0s")

    monkeypatch.setattr(launch, "spawn_server", spawn)
    monkeypatch.setattr(launch, "wait_for_health", timed_out)
    try:
        with pytest.raises(pytest.fail.Exception, match="Timeout"):
            start_server([sys.executable, "-c", "import time; time.sleep(600)"],
                         f"http://127.0.0.1:{free_port()}/health", tmp_path / "server.log")
        assert [proc.poll() is not None for proc in started] == [True]  # stopped, not running
    finally:
        for proc in started:  # this test's own cleanup, should start_server leave it
            stop_process(proc)
