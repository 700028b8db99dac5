"""Probe env server process: serve the app with waitress.

    python -m env.probe.server --config configs/probe_stated_cpu.yaml [--set probe.port=8400]

Owns process life: `<log_dir>/server-<port>.pid` (keyed by port: servers
sharing a `log_dir` keep their own) is written once listening and removed at exit, a
housekeeping thread evicts idle episodes, SIGTERM stops cleanly with the requests in flight
answered first (`env.http_server.Server.serve`). Tasks are generated per request from the seed
(`evolving_rl.domains.probe_tasks`), so there is nothing to load.
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

from env.episodes import EpisodeTable, housekeep
from env.http_server import make_server
from env.launch import add_config_arguments, config_from_args, exit_on_sigterm, write_pid_file
from env.probe.app import Episode, create_app
from evolving_rl.config.schema import ProbeConfig

logger = logging.getLogger(__name__)


def pid_file(cfg: ProbeConfig) -> Path:
    return Path(cfg.log_dir) / f"server-{cfg.port}.pid"


def log_file(cfg: ProbeConfig) -> Path:
    return Path(cfg.log_dir) / f"server-{cfg.port}.log"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    cfg = config_from_args(parser.parse_args(argv)).probe
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    exit_on_sigterm()
    table: EpisodeTable[Episode] = EpisodeTable(cfg.capacity, cfg.episode_ttl_s,
                                                cfg.retry_after_s)
    server = make_server(create_app(cfg, table), host=cfg.host, port=cfg.port,
                         threads=cfg.threads, max_body_bytes=cfg.max_body_bytes, ident="probe")
    write_pid_file(pid_file(cfg))
    stop = threading.Event()
    threading.Thread(target=housekeep, args=(table, stop), daemon=True,
                     name="housekeeping").start()
    logger.info("serving %s probe tasks (seed %d) on http://%s:%d", cfg.kind, cfg.seed,
                cfg.host, cfg.port)
    try:
        server.serve()
    finally:
        stop.set()
        logger.info("probe server on port %d stopped", cfg.port)


if __name__ == "__main__":
    main()
