"""Start, health-check and stop the retrieval server as a background process.

    python -m env.retrieval.launcher start --config configs/local_cpu.yaml [--port N] [--set k=v]
    python -m env.retrieval.launcher stop  --config configs/local_cpu.yaml [--port N]

Owns the retrieval-specific part of launching (command line, health URL, PID and log file
names); the generic mechanics are in `env.launch`. Tests and shell launchers use
`start_retrieval_server` / `stop_retrieval_server`. Stopping signals only the PID recorded in
this server's PID file, and only if that PID still runs `env.retrieval`.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from env.launch import LaunchError, start_server, stop_pid_file, stop_process
from env.retrieval.server import log_file, pid_file
from evolving_rl.config import ConfigError, load_config
from evolving_rl.config.schema import RetrievalConfig

logger = logging.getLogger(__name__)

MODULE = "env.retrieval"


@dataclass
class RetrievalServer:
    """A server this process started."""

    proc: subprocess.Popen
    url: str
    pid_file: Path
    log_file: Path

    def stop(self, timeout_s: float = 10.0) -> int:
        return stop_process(self.proc, timeout_s)


def _retrieval_config(config_path: str | Path, port: int | None,
                      overrides: list[str]) -> tuple[RetrievalConfig, list[str]]:
    overrides = list(overrides) + ([f"retrieval.port={port}"] if port is not None else [])
    return load_config(config_path, overrides).retrieval, overrides


def start_retrieval_server(config_path: str | Path, port: int | None = None,
                           overrides: list[str] | tuple[str, ...] = (),
                           timeout_s: float = 120.0) -> RetrievalServer:
    """Start `python -m env.retrieval` in the background and wait for `/health`."""
    cfg, all_overrides = _retrieval_config(config_path, port, list(overrides))
    cmd = [sys.executable, "-m", MODULE, "--config", str(config_path)]
    for override in all_overrides:
        cmd += ["--set", override]
    url = f"http://{cfg.host}:{cfg.port}"
    # The server logs to its own .log; its raw stdout/stderr (crashes, warnings) go to .out.
    proc = start_server(cmd, f"{url}/health", log_file(cfg).with_suffix(".out"), timeout_s)
    return RetrievalServer(proc, url, pid_file(cfg), log_file(cfg))


def stop_retrieval_server(config_path: str | Path, port: int | None = None,
                          overrides: list[str] | tuple[str, ...] = ()) -> bool:
    """Stop the server recorded in the configured PID file; False when none was running."""
    cfg, _ = _retrieval_config(config_path, port, list(overrides))
    return stop_pid_file(pid_file(cfg), MODULE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--config", required=True)
    parser.add_argument("--port", type=int)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for health")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        if args.action == "start":
            server = start_retrieval_server(args.config, args.port, args.overrides, args.timeout)
            logger.info("retrieval server pid %d at %s (log %s)", server.proc.pid, server.url,
                        server.log_file)
        else:
            stop_retrieval_server(args.config, args.port, args.overrides)
    except (ConfigError, LaunchError) as err:
        logger.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
