"""Checks the local main job runs before it writes or moves anything (`preflight`).

Owns what a mistake would otherwise cost a run: every server port the job will bind (the
retrieval server's and the environment's: its services module's `ports(cfg)` when it has one,
else every `*port` field of its config section) must be free, and every path the job reads
(`local.resume_from`, an HF folder named as `local.model`) must exist. Each failure names the
config key and how to change it with `--set`; all failures are reported together in one
`ConfigError`, so one attempt shows every mistake.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from env.launch import free_port_block, port_taken
from evolving_rl.config import ConfigError
from evolving_rl.config.schema import Config
from evolving_rl.local.model import GGUF_MODELS

# config key -> (host, first port, how many consecutive ports from it)
PortMap = Mapping[str, tuple[str, int, int]]


def config_ports(cfg: Config, services: ModuleType) -> dict[str, tuple[str, int, int]]:
    """Every port the job's servers bind, by config key (module docstring)."""
    ports = {"retrieval.port": (cfg.retrieval.host, cfg.retrieval.port, 1)}
    own = getattr(services, "ports", None)
    if own is not None:
        return {**ports, **own(cfg)}
    section = getattr(cfg, cfg.environment)
    for item in dataclasses.fields(section):
        if item.name.endswith("port"):
            ports[f"{cfg.environment}.{item.name}"] = (section.host, getattr(section, item.name), 1)
    return ports


def port_problems(ports: PortMap) -> list[str]:
    """One line per key with a port in use, naming a free one to `--set` instead."""
    problems = []
    wanted = {port + i for _host, port, count in ports.values() for i in range(count)}
    for key, (host, port, count) in ports.items():
        taken = [p for p in range(port, port + count) if port_taken(p, host)]
        if taken:
            spare = free_port_block(count, host, exclude=wanted)
            problems.append(f"{key}: port {taken[0]} on {host} is in use (another server, "
                            f"perhaps another run's); stop it, or choose another port: "
                            f"--set {key}={spare}")
    return problems


def path_problems(cfg: Config) -> list[str]:
    """One line per path the job reads that is missing, or written that cannot be."""
    local = cfg.local
    problems = []
    if local.resume_from and not (Path(local.resume_from) / "config.json").is_file():
        problems.append(f"local.resume_from: no checkpoint (config.json) in {local.resume_from}")
    if local.model not in GGUF_MODELS and not (Path(local.model) / "config.json").is_file():
        problems.append(f"local.model: {local.model!r} is neither one of "
                        f"{sorted(GGUF_MODELS)} nor an HF model folder (config.json)")
    run_dir = Path(cfg.run.output_dir)
    if run_dir.exists() and not run_dir.is_dir():
        problems.append(f"run.output_dir: {run_dir} is a file, not a folder")
    return problems


def preflight(cfg: Config, services: ModuleType) -> None:
    """Raise one `ConfigError` listing every problem above; nothing was written or started."""
    problems = path_problems(cfg) + port_problems(config_ports(cfg, services))
    if problems:
        raise ConfigError("", "the run did not start; nothing was written or moved:\n  "
                          + "\n  ".join(problems))
