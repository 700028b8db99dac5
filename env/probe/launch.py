"""Start and stop the probe env server of a config, by PID file only.

    python -m env.probe.launch start --config configs/probe_stated_cpu.yaml
    python -m env.probe.launch stop  --config configs/probe_stated_cpu.yaml

Owns the launch API, `start(cfg)` / `stop(cfg)` (what the main job, the slime launcher and the
tests call), and the operator commands over it (`env.launch.launcher_main`): the server runs in
its own session with the config on its command line, output to `<log_dir>/server-<port>.log`;
`start` returns its PID once `/health` answers, `stop` signals exactly the PID in its PID file
(`<log_dir>/server-<port>.pid`).
"""

from __future__ import annotations

import logging
import sys

from env.launch import (
    LaunchError,
    config_arguments,
    launcher_main,
    port_taken,
    start_server,
    stop_pid_file,
)
from env.probe.server import log_file, pid_file
from evolving_rl.config import Config

logger = logging.getLogger(__name__)

MODULE = "env.probe.server"


def start(cfg: Config) -> int:
    """Start the server of `cfg.probe`, wait until it is healthy; its PID."""
    probe = cfg.probe
    if port_taken(probe.port, probe.host):
        raise LaunchError(f"probe.port {probe.port} on {probe.host} is in use")
    url = f"http://{probe.host}:{probe.port}"
    proc = start_server([sys.executable, "-m", MODULE, *config_arguments(cfg)], f"{url}/health",
                        log_file(probe), timeout_s=probe.start_timeout_s)
    logger.info("probe server pid %d at %s; log in %s", proc.pid, url, probe.log_dir)
    return proc.pid


def stop(cfg: Config) -> bool:
    """Stop the server named by our PID file; False when none was running."""
    return stop_pid_file(pid_file(cfg.probe), MODULE, cfg.probe.stop_timeout_s)


def main(argv: list[str] | None = None) -> int:
    return launcher_main(argv, __doc__.splitlines()[0], start, stop)


if __name__ == "__main__":
    sys.exit(main())
