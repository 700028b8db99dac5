"""Test helpers for the real servers: contract configs on free ports (ALFWorld, Mind2Web), their
env servers' launchers, and a probe of a server under slow clients."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import requests
import yaml

from env.launch import free_port, free_port_block

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_turn_tokens": 128,
            "max_context_tokens": 16384,  # byte tokens
            "retrieval_split": "train", "max_concurrent_episodes": 8}
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
        "clients": CLIENTS,
        "alfworld": {"data_root": str(data), "prepared_dir": str(data / "prepared"),
                     "router_port": port, "worker_base_port": port + 1, "n_workers": 2,
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
