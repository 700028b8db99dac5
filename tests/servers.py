"""Test helpers for the real servers: contract configs on free ports (ALFWorld, Mind2Web), their
env servers' launchers, a probe of a server under slow clients, and normal requests made while
thousands of hostile connections are held open (`normal_requests_under_hostile_connections`)."""

from __future__ import annotations

import logging
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from env.launch import free_port, free_port_block
from tests.fakes.context import turn_sampling

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = {"n_skills": 2, "top_k": 2, "n_repeats": 1,
            "max_context_tokens": 16384,  # byte tokens
            "retrieval_split": "train", "max_concurrent_episodes": 8}
TURN_TOKENS = 128  # byte tokens of one solver turn
CLIENTS = {"env_timeout_s": 30.0, "retrieval_timeout_s": 30.0, "policy_timeout_s": 30.0,
           "max_retries": 1, "retry_backoff_s": 0.05}


def _retrieval(folder: Path, exclude: range) -> dict:
    return {"model": "minilm", "cache_path": str(folder / "cache.npz"),
            "port": free_port(exclude=exclude), "log_dir": str(folder / "retrieval_logs")}


def contract_config_file(folder: Path, data: Path) -> Path:
    """A small pipeline config over the games at `data`, on free loopback ports."""
    port = free_port_block(3)  # router + 2 workers
    values = {
        "environment": "alfworld",
        "pipeline": {**PIPELINE, "max_steps": 4},
        "sampling": turn_sampling(TURN_TOKENS),
        "clients": CLIENTS,
        "alfworld": {"data_root": str(data), "prepared_dir": str(data / "prepared"),
                     "port": port, "worker_base_port": port + 1, "n_workers": 2,
                     "capacity": 64, "log_dir": str(folder / "alfworld_logs")},
        "retrieval": _retrieval(folder, range(port, port + 3)),
        "run": {"output_dir": str(folder / "run")},
    }
    path = folder / "contract.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def web_contract_config_file(folder: Path, data_root: Path, prepared_dir: Path) -> Path:
    """A small Mind2Web pipeline config over the tasks at `data_root`, on free loopback ports."""
    port = free_port()
    values = {
        "environment": "mind2web",
        "pipeline": {**PIPELINE, "max_steps": 8},
        "sampling": turn_sampling(TURN_TOKENS),
        "clients": CLIENTS,
        "mind2web": {"data_root": str(data_root), "prepared_dir": str(prepared_dir),
                     "port": port, "server_cache_dir": str(folder / "server_cache"),
                     "threads": 4, "log_dir": str(folder / "mind2web_logs"),
                     # the scripted solvers' gold replay wins every task (tests/fakes/web.py)
                     "empty_positive_rule": "reference_fallback"},
        "retrieval": _retrieval(folder, range(port, port + 1)),
        "run": {"output_dir": str(folder / "run")},
    }
    path = folder / "web_contract.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def alfworld_servers(action: str, config: Path) -> None:
    """Start or stop the ALFWorld router + workers of `config` through their launcher."""
    subprocess.run([sys.executable, "-m", "env.alfworld.launch", action, "--config",
                    str(config)], check=True, cwd=ROOT, timeout=180)


def mind2web_server(action: str, config: Path) -> None:
    """Start or stop the Mind2Web env server of `config` through its launcher."""
    subprocess.run([sys.executable, "-m", "env.mind2web.launch", action, "--config",
                    str(config)], check=True, cwd=ROOT, timeout=180)


SLOW_CLIENTS = 200  # more than waitress's default connection limit (100) could hold


def health_latencies_under_slow_clients(url: str, probes: int = 5) -> list[float]:
    """Seconds each of `probes` GET /health took while `SLOW_CLIENTS` loopback connections each
    sent a request's headers announcing a body, then one byte of it, and nothing more (each probe
    times out after 5 s: at most ~30 s in all). Raises if a probe is not answered 200."""
    parts = urlsplit(url)
    assert parts.hostname in ("127.0.0.1", "localhost"), "loopback only"
    head = (f"POST /reset HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n{").encode()
    sockets: list[socket.socket] = []
    try:
        for _ in range(SLOW_CLIENTS):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
            sock.sendall(head)
            sockets.append(sock)
        time.sleep(0.5)  # every slow connection accepted (or refused to be) by now
        latencies = []
        for _ in range(probes):
            start = time.perf_counter()
            resp = requests.get(f"{url}/health", timeout=5)
            assert resp.status_code == 200, resp.text
            latencies.append(time.perf_counter() - start)
        return latencies
    finally:
        for sock in sockets:
            sock.close()


HOSTILE = 2000
# idle: connects, sends nothing; headers: a request line, then one header byte a second;
# body: whole headers announcing 1000 bytes, then one body byte a second.
HOSTILE_KINDS = ("idle", "headers", "body")


@dataclass
class HostileRun:
    """What `normal_requests_under_hostile_connections` saw."""

    opened: dict[str, int] = field(default_factory=dict)
    closed_by_server: dict[str, int] = field(default_factory=dict)
    normal: int = 0
    answered: int = 0
    slowest_s: float = 0.0


def _loopback(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname in ("127.0.0.1", "localhost"), "loopback only"
    return parts.hostname, int(parts.port or 80)


def _hostile(address: tuple[str, int], kind: str) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    if kind == "headers":
        sock.sendall(b"POST /reset HTTP/1.1\r\nHost: hostile\r\nX-Slow: ")
    elif kind == "body":
        sock.sendall(b"POST /reset HTTP/1.1\r\nHost: hostile\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 1000\r\n\r\n{")
    sock.setblocking(False)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _open_files_for(count: int) -> None:
    """Raise this process's soft open-file limit to hold `count` sockets, or skip the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = count + 256
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the open-file hard limit {hard} cannot hold {count} connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def normal_requests_under_hostile_connections(
        url: str, probe: Callable[[], bool], seconds: float = 20.0,
        count: int = HOSTILE) -> HostileRun:
    """Open `count` hostile loopback connections to `url` (the kinds of `HOSTILE_KINDS` in turn)
    and keep them trickling for `seconds`, while `probe()` (a normal request: True when answered
    as it should be; False when it raises a `requests` error) runs every half second in another
    thread."""
    _open_files_for(count)
    address = _loopback(url)
    run = HostileRun({k: 0 for k in HOSTILE_KINDS}, {k: 0 for k in HOSTILE_KINDS})
    done = threading.Event()

    def _probing() -> None:
        while not done.wait(0.5):
            start = time.perf_counter()
            try:
                ok = probe()
            except requests.RequestException:
                ok = False
            run.slowest_s = max(run.slowest_s, time.perf_counter() - start)
            run.normal += 1
            run.answered += int(ok)

    prober = threading.Thread(target=_probing, daemon=True)
    prober.start()
    held: list[tuple[socket.socket, str]] = []
    end = time.monotonic() + seconds
    try:
        for number in range(count):
            kind = HOSTILE_KINDS[number % len(HOSTILE_KINDS)]
            held.append((_hostile(address, kind), kind))
            run.opened[kind] += 1
        while True:
            held = _trickle_round(held, run)
            if time.monotonic() >= end:
                break
            time.sleep(1.0)
    finally:
        done.set()
        prober.join(30)
        for sock, _ in held:
            sock.close()
    logger.info("under %d hostile connections: %s", count, run)
    return run


def _trickle_round(held: list[tuple[socket.socket, str]],
                   run: HostileRun) -> list[tuple[socket.socket, str]]:
    """One byte more on every trickling connection; those the server closed are dropped."""
    still = []
    for sock, kind in held:
        if _closed_by_server(sock):
            run.closed_by_server[kind] += 1
            sock.close()
            continue
        if kind != "idle":
            try:
                sock.send(b"x")
            except OSError:
                pass  # closed: counted next round
        still.append((sock, kind))
    return still


def health_probe(url: str, timeout_s: float = 15.0) -> Callable[[], bool]:
    """A normal request: GET /health answered 200 within `timeout_s`."""
    return lambda: requests.get(f"{url}/health", timeout=timeout_s).status_code == 200


def assert_served_under_hostile_connections(url: str, probe: Callable[[], bool]) -> HostileRun:
    """A real server's check: every `probe` answered while `HOSTILE` connections trickle for
    20 s, and by then the idle ones and those trickling headers closed (past their 10 s
    deadline, or shed at the connection limit)."""
    run = normal_requests_under_hostile_connections(url, probe, seconds=20)
    assert run.normal >= 10 and run.answered == run.normal, run
    assert run.closed_by_server["idle"] == run.opened["idle"], run
    assert run.closed_by_server["headers"] == run.opened["headers"], run
    return run
