"""Start and stop the Mind2Web env server of a config, by PID file only.

    python -m env.mind2web.launch start --config configs/web.yaml [--set mind2web.port=8300]
    python -m env.mind2web.launch stop  --config configs/web.yaml

Owns the launch API, `start(cfg)` / `stop(cfg)` (what the main job and the tests call), and the
operator commands over it (`env.launch.launcher_main`). `start` runs `env.mind2web.server` in
its own session with the config on its command line (`env.launch.config_arguments`), output to
`<log_dir>/server-<port>.log`, and returns its PID once `/health` answers (the server indexes its
tasks first: `start_timeout_s`). `stop` signals exactly the PID in `<log_dir>/server-<port>.pid`
(keyed by port: servers on other ports may share the `log_dir`), after checking that it still
runs our module. """

from __future__ import annotations

import logging
import sys

from env.launch import (
    LaunchError,
    config_arguments,
    health_ok,
    launcher_main,
    read_pid,
    start_server,
    stop_pid_file,
)
from env.mind2web.server import log_file, pid_file
from evolving_rl.config import Config

logger = logging.getLogger(__name__)

MODULE = "env.mind2web.server"


def start(cfg: Config) -> int:
    """Start the server of `cfg.mind2web` and wait until it is healthy; its PID."""
    web = cfg.mind2web
    url = f"http://{web.host}:{web.port}"
    if read_pid(pid_file(web)) is not None and health_ok(f"{url}/health"):
        raise LaunchError(f"a Mind2Web server is already running at {url} (see {web.log_dir})")
    cmd = [sys.executable, "-m", MODULE, *config_arguments(cfg)]
    proc = start_server(cmd, f"{url}/health", log_file(web), timeout_s=web.start_timeout_s)
    logger.info("Mind2Web server pid %d at %s; log in %s", proc.pid, url, web.log_dir)
    return proc.pid


def stop(cfg: Config) -> bool:
    """Stop the server named by our PID file; False when none was running."""
    return stop_pid_file(pid_file(cfg.mind2web), MODULE, cfg.mind2web.stop_timeout_s)


def main(argv: list[str] | None = None) -> int:
    return launcher_main(argv, __doc__.splitlines()[0], start, stop)


if __name__ == "__main__":
    sys.exit(main())
