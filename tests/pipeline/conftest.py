"""Session fixtures for the contract tests: a config on free ports over the generated ALFWorld
games, the real retrieval server (MiniLM cache built once) and the real ALFWorld router +
workers, started through their launchers and stopped by them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from env.launch import free_port
from evolving_rl.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
def _config(folder: Path, data: Path) -> Path:
    port = free_port()
    values = {
        "environment": "alfworld",
        "pipeline": {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_steps": 4,
                     "max_turn_tokens": 128, "max_context_tokens": 4096,
                     "retrieval_split": "train", "max_concurrent_episodes": 8},
        "clients": {"env_timeout_s": 30.0, "retrieval_timeout_s": 30.0, "policy_timeout_s": 30.0,
                    "max_retries": 1, "retry_backoff_s": 0.05},
        "alfworld": {"data_root": str(data), "prepared_dir": str(data / "prepared"),
                     "router_port": port, "worker_base_port": port + 1, "n_workers": 2,
                     "capacity_per_worker": 64, "log_dir": str(folder / "alfworld_logs")},
        "retrieval": {"model": "minilm", "cache_path": str(folder / "cache.npz"),
                      "port": free_port(), "log_dir": str(folder / "retrieval_logs")},
        "run": {"output_dir": str(folder / "run")},
    }
    path = folder / "contract.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def alfworld(action: str, config: Path) -> None:
    subprocess.run([sys.executable, "-m", "env.alfworld.launch", action, "--config",
                    str(config)], check=True, cwd=ROOT, timeout=180)


@pytest.fixture(scope="session")
def contract_config_path(tmp_path_factory, alfworld_data) -> Path:
    return _config(tmp_path_factory.mktemp("contract"), alfworld_data)


@pytest.fixture(scope="session")
def contract_config(contract_config_path) -> Config:
    return load_config(contract_config_path)


@pytest.fixture(scope="session")
def retrieval_server(contract_config_path):
    """The real retrieval server over the generated tasks, for the whole session."""
    from env.retrieval.launcher import start_retrieval_server, stop_retrieval_server

    subprocess.run([sys.executable, "-m", "evolving_rl.retrieval.build", "--config",
                    str(contract_config_path)], check=True, cwd=ROOT, timeout=300,
                   stdout=subprocess.DEVNULL)
    start_retrieval_server(contract_config_path, timeout_s=120)
    try:
        yield contract_config_path
    finally:
        stop_retrieval_server(contract_config_path)


@pytest.fixture(scope="session")
def real_servers(retrieval_server):
    """Retrieval + ALFWorld servers for the whole session."""
    alfworld("start", retrieval_server)
    try:
        yield retrieval_server
    finally:
        alfworld("stop", retrieval_server)
