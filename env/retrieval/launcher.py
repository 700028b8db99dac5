"""Start, health-check and stop the retrieval server as a background process.

    python -m env.retrieval.launcher start --config configs/local_cpu.yaml [--set k=v]
    python -m env.retrieval.launcher stop  --config configs/local_cpu.yaml [--set k=v]

Owns the retrieval-specific part of launching (command line, health URL, PID and log file
names); the generic mechanics are in `env.launch`. The launch API, `start_retrieval_server(cfg)`
/ `stop_retrieval_server(cfg)`, takes a `Config` (the main job, tests and benchmarks call it),
its waits `retrieval.start_timeout_s` / `stop_timeout_s`; the command line is every launcher's
(`env.launch.launcher_main`). The server process gets the config on its command line
(`env.launch.config_arguments`). Stopping signals only the PID recorded in this server's PID
file, and only if that PID still runs `env.retrieval`.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from env.launch import config_arguments, launcher_main, start_server, stop_pid_file, stop_process
from env.retrieval.server import log_file, pid_file
from evolving_rl.config import Config

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


def start_retrieval_server(cfg: Config) -> RetrievalServer:
    """Start `python -m env.retrieval` with `cfg` in the background and wait for `/health`."""
    retrieval = cfg.retrieval
    cmd = [sys.executable, "-m", MODULE, *config_arguments(cfg)]
    url = f"http://{retrieval.host}:{retrieval.port}"
    # The server logs to its own .log; its raw stdout/stderr (crashes, warnings) go to .out.
    proc = start_server(cmd, f"{url}/health", log_file(retrieval).with_suffix(".out"),
                        retrieval.start_timeout_s)
    logger.info("retrieval server pid %d at %s (log %s)", proc.pid, url, log_file(retrieval))
    return RetrievalServer(proc, url, pid_file(retrieval), log_file(retrieval))


def stop_retrieval_server(cfg: Config) -> bool:
    """Stop the server recorded in the configured PID file; False when none was running."""
    return stop_pid_file(pid_file(cfg.retrieval), MODULE, cfg.retrieval.stop_timeout_s)


def main(argv: list[str] | None = None) -> int:
    return launcher_main(argv, __doc__.splitlines()[0], start_retrieval_server,
                         stop_retrieval_server)


if __name__ == "__main__":
    sys.exit(main())
