"""Start, health-check and stop the retrieval server as a background process.

    python -m env.retrieval.launcher start --config configs/local_cpu.yaml [--port N] [--set k=v]
    python -m env.retrieval.launcher stop  --config configs/local_cpu.yaml [--port N]

Owns the retrieval-specific part of launching (command line, health URL, PID and log file
names); the generic mechanics are in `env.launch`. The launch API, `start_retrieval_server(cfg)`
/ `stop_retrieval_server(cfg)`, takes a `Config` (the main job, tests and benchmarks call it);
the command line builds that `Config` from `--config`, `--port` and `--set`, then calls it.
The server process gets the config on its command line (`env.launch.config_arguments`).
Stopping signals only the PID recorded in this server's PID file, and only if that PID still
runs `env.retrieval`.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from env.launch import LaunchError, config_arguments, start_server, stop_pid_file, stop_process
from env.retrieval.server import log_file, pid_file
from evolving_rl.config import Config, ConfigError, load_config

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


def start_retrieval_server(cfg: Config, timeout_s: float = 120.0) -> RetrievalServer:
    """Start `python -m env.retrieval` with `cfg` in the background and wait for `/health`."""
    retrieval = cfg.retrieval
    cmd = [sys.executable, "-m", MODULE, *config_arguments(cfg)]
    url = f"http://{retrieval.host}:{retrieval.port}"
    # The server logs to its own .log; its raw stdout/stderr (crashes, warnings) go to .out.
    proc = start_server(cmd, f"{url}/health", log_file(retrieval).with_suffix(".out"), timeout_s)
    return RetrievalServer(proc, url, pid_file(retrieval), log_file(retrieval))


def stop_retrieval_server(cfg: Config) -> bool:
    """Stop the server recorded in the configured PID file; False when none was running."""
    return stop_pid_file(pid_file(cfg.retrieval), MODULE)


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
    port = [f"retrieval.port={args.port}"] if args.port is not None else []
    try:
        cfg = load_config(args.config, [*args.overrides, *port])
        if args.action == "start":
            server = start_retrieval_server(cfg, args.timeout)
            logger.info("retrieval server pid %d at %s (log %s)", server.proc.pid, server.url,
                        server.log_file)
        else:
            stop_retrieval_server(cfg)
    except (ConfigError, LaunchError) as err:
        logger.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
