"""Start and stop the ALFWorld servers (router + N workers) from a config, by PID file only.

Owns the operator commands. `start` launches the router as its own session, which spawns and
supervises the workers; it returns once the router reports every worker healthy. Each process
writes its own PID file under `log_dir` (`router.pid`, `worker-<i>.pid`, rewritten by a
respawned worker) and logs to its own file there. `stop` signals exactly the PIDs in those files
(SIGTERM, then SIGKILL after `stop_timeout_s`), after checking each still runs our module — the
router first (it stops its workers), then any worker left over (e.g. when the router was killed).

    python -m env.alfworld.launch start --config configs/alfworld.yaml [--set alfworld.n_workers=4]
    python -m env.alfworld.launch stop  --config configs/alfworld.yaml
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from env.launch import LaunchError, health_ok, read_pid, start_server, stop_pid_file
from evolving_rl.config import load_config

logger = logging.getLogger(__name__)

ROUTER_MODULE = "env.alfworld.router"
WORKER_MODULE = "env.alfworld.worker"


def router_url(config: str, overrides: list[str]) -> str:
    cfg = load_config(config, overrides).alfworld
    return f"http://{cfg.host}:{cfg.router_port}"


def start(config: str, overrides: list[str] | None = None) -> int:
    """Start router + workers and wait until all are healthy; the router's PID."""
    overrides = list(overrides or [])
    cfg = load_config(config, overrides).alfworld
    log_dir = Path(cfg.log_dir)
    url = f"http://{cfg.host}:{cfg.router_port}"
    if read_pid(log_dir / "router.pid") is not None and health_ok(f"{url}/health"):
        raise LaunchError(f"an ALFWorld router is already running at {url} (see {log_dir})")
    sets = [arg for item in overrides for arg in ("--set", item)]
    cmd = [sys.executable, "-m", ROUTER_MODULE, "--config", config, *sets]
    timeout = cfg.start_timeout_s * 2  # workers start in parallel, then the router answers
    proc = start_server(cmd, f"{url}/health", log_dir / "router.log", timeout_s=timeout)
    logger.info("ALFWorld router pid %d at %s with %d workers; logs in %s", proc.pid, url,
                cfg.n_workers, log_dir)
    return proc.pid


def stop(config: str, overrides: list[str] | None = None) -> int:
    """Stop the processes named by our PID files; how many were signalled."""
    cfg = load_config(config, list(overrides or [])).alfworld
    log_dir = Path(cfg.log_dir)
    stopped = int(stop_pid_file(log_dir / "router.pid", ROUTER_MODULE, cfg.stop_timeout_s))
    for pid_file in sorted(log_dir.glob("worker-*.pid")):
        stopped += int(stop_pid_file(pid_file, WORKER_MODULE, cfg.stop_timeout_s))
    logger.info("stopped %d ALFWorld server processes", stopped)
    return stopped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.action == "start":
        start(args.config, args.set)
    else:
        stop(args.config, args.set)


if __name__ == "__main__":
    main()
