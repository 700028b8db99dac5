"""Constants and helpers shared by the retrieval tests (imported by module name: pytest puts
this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

import yaml

from env.launch import free_port

N_TASKS = 300
MAX_K = 20
MAX_QUERIES = 8
MAX_BODY = 4096


def write_config(folder: Path, prepared_dir: Path, **retrieval) -> Path:
    """A YAML config whose retrieval section points into `folder`."""
    section = {"model": "minilm", "prepared_dir": str(prepared_dir),
               "cache_path": str(folder / "cache.npz"), "log_dir": str(folder / "logs"),
               "max_k": MAX_K, "max_batch_queries": MAX_QUERIES, "max_body_bytes": MAX_BODY,
               "threads_per_server": 4, "port": free_port(), **retrieval}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"environment": "alfworld", "retrieval": section}))
    return path
