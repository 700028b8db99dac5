"""Start and stop the ALFWorld servers (router + N workers) of a config, by PID file only.

Owns the launch API, `start(cfg)` / `stop(cfg)` (what the main job calls), and the operator
commands over it (`env.launch.launcher_main`), which build the `Config` from `--config` and
`--set`. `start` launches the router as its own session, handing it the config
(`env.launch.config_arguments`); the router spawns and supervises the workers; `start` returns
once the router reports every worker healthy. Each process writes its own PID file under
`log_dir`, named by the port it serves (`router-<port>.pid`, `worker-<port>.pid`, rewritten by a
respawned worker), and logs to its own file there (`router-<port>.log`, `worker-<port>.log`): runs
on other ports may share a `log_dir` (the default one is shared by every config) without touching
each other's files. `stop` signals exactly the PIDs in the files of its config's ports (SIGTERM,
then SIGKILL after `stop_timeout_s`), after checking each still runs our module — the router
first (it stops its workers), then any worker left over (e.g. when the router was killed). Before
writing or starting anything, `start` refuses (exit 2 naming them) when any port it would bind —
the router's or a worker's — already has a server; a start racing another past that check fails
its health wait instead, which takes only the process it spawned (`env.launch`).

    python -m env.alfworld.launch start --config configs/alfworld.yaml [--set alfworld.n_workers=4]
    python -m env.alfworld.launch stop  --config configs/alfworld.yaml
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from env.launch import (
    LaunchError,
    config_arguments,
    health_ok,
    launcher_main,
    port_taken,
    read_pid,
    start_server,
    stop_pid_file,
)
from evolving_rl.config import Config
from evolving_rl.config.schema import AlfworldConfig

logger = logging.getLogger(__name__)

ROUTER_MODULE = "env.alfworld.router"
WORKER_MODULE = "env.alfworld.worker"


def pid_file(alf: AlfworldConfig, role: str, port: int) -> Path:
    """The PID file of the `role` ("router" or "worker") process serving `port`."""
    return Path(alf.log_dir) / f"{role}-{port}.pid"


def log_file(alf: AlfworldConfig, role: str, port: int) -> Path:
    """The log of the `role` process serving `port`."""
    return Path(alf.log_dir) / f"{role}-{port}.log"


def start(cfg: Config) -> int:
    """Start router + workers of `cfg.alfworld` and wait until all are healthy; the router's PID."""
    alf = cfg.alfworld
    url = f"http://{alf.host}:{alf.port}"
    router_pid = pid_file(alf, "router", alf.port)
    if read_pid(router_pid) is not None and health_ok(f"{url}/health"):
        raise LaunchError(f"an ALFWorld router is already running at {url} (pid file "
                          f"{router_pid})")
    busy = [port for port in bound_ports(cfg) if port_taken(port, alf.host)]
    if busy:
        raise LaunchError(f"port(s) {', '.join(map(str, busy))} of {alf.host} in use (another "
                          "server, perhaps another run's): stop it by its PID file, or choose "
                          "other ports: --set alfworld.port=N --set alfworld.worker_base_port=M")
    cmd = [sys.executable, "-m", ROUTER_MODULE, *config_arguments(cfg)]
    timeout = alf.start_timeout_s * 2  # workers start in parallel, then the router answers
    proc = start_server(cmd, f"{url}/health", log_file(alf, "router", alf.port),
                        timeout_s=timeout)
    logger.info("ALFWorld router pid %d at %s with %d workers; logs in %s", proc.pid, url,
                alf.n_workers, alf.log_dir)
    return proc.pid


def bound_ports(cfg: Config) -> list[int]:
    """Every port a start binds: the router's, then the workers' (`worker_base_port + i`)."""
    alf = cfg.alfworld
    return [alf.port, *range(alf.worker_base_port, alf.worker_base_port + alf.n_workers)]


def stop(cfg: Config) -> int:
    """Stop the processes named by our PID files; how many were signalled."""
    alf = cfg.alfworld
    router, *workers = bound_ports(cfg)
    stopped = int(stop_pid_file(pid_file(alf, "router", router), ROUTER_MODULE,
                                alf.stop_timeout_s))
    for port in workers:
        stopped += int(stop_pid_file(pid_file(alf, "worker", port), WORKER_MODULE,
                                     alf.stop_timeout_s))
    logger.info("stopped %d ALFWorld server processes", stopped)
    return stopped


def main(argv: list[str] | None = None) -> int:
    return launcher_main(argv, __doc__.splitlines()[0], start, stop)


if __name__ == "__main__":
    sys.exit(main())
