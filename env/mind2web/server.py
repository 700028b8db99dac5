"""Mind2Web env server process: index the tasks, then serve the app with waitress.

    python -m env.mind2web.server --config configs/web.yaml [--set mind2web.port=8300]

Owns start-up and process life: the task store is built (or its on-disk index reused) before the
port opens, so a healthy server has every task indexed, and data it cannot serve as is (an
annotation id in two files, prepared splits from files it does not serve or that changed since,
a task file or prepared manifest that does not parse: `TaskDataError`) exits 2 with the message
in one line, never healthy; cold page snapshots are built by a pool of processes
(`mind2web.snapshot_processes`, `env.mind2web.snapshot_pool`); `<log_dir>/server-<port>.pid`
(keyed by port: servers sharing a `log_dir` keep their own) is written once listening and
removed at exit; a housekeeping thread evicts idle episodes; SIGTERM stops cleanly, the requests
in flight answered first (`env.http_server.Server.serve`).
"""

from __future__ import annotations

import argparse
import gc
import logging
import threading
from pathlib import Path

from env.episodes import EpisodeTable, housekeep
from env.http_server import make_server
from env.launch import add_config_arguments, config_from_args, exit_on_sigterm, write_pid_file
from env.mind2web.app import create_app
from env.mind2web.episodes import Episode
from env.mind2web.snapshot_pool import SnapshotBuilder, pool_size
from env.mind2web.store import TaskDataError, TaskStore, check_prepared
from evolving_rl.config.schema import Mind2WebConfig

logger = logging.getLogger(__name__)


def pid_file(cfg: Mind2WebConfig) -> Path:
    return Path(cfg.log_dir) / f"server-{cfg.port}.pid"


def log_file(cfg: Mind2WebConfig) -> Path:
    return Path(cfg.log_dir) / f"server-{cfg.port}.log"


def _collect_rarely() -> None:
    """The cyclic garbage collector for a server whose heap is its task index and page cache:
    what exists at start-up (the index) is never walked again (`gc.freeze`), and collections
    come every 100,000 net allocations instead of 700. A page snapshot is thousands of objects
    and no cycles; at the default threshold the collections they trigger walk the whole cache."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    cfg = config_from_args(parser.parse_args(argv)).mind2web
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    exit_on_sigterm()
    builder = SnapshotBuilder(pool_size(cfg.snapshot_processes))
    try:
        store = TaskStore(cfg.data_root, cfg.server_cache_dir, cfg.task_cache_size,
                          cfg.snapshot_cache_size, builder.build)
        check_prepared(store, cfg.prepared_dir)
    except TaskDataError as err:
        builder.close()
        logger.error("error: %s", err)
        raise SystemExit(2) from None
    table: EpisodeTable[Episode] = EpisodeTable(cfg.capacity, cfg.episode_ttl_s,
                                                cfg.retry_after_s)
    server = make_server(create_app(cfg, store, table), host=cfg.host, port=cfg.port,
                         threads=cfg.threads, max_body_bytes=cfg.max_body_bytes,
                         ident="mind2web")
    _collect_rarely()
    write_pid_file(pid_file(cfg))
    stop = threading.Event()
    threading.Thread(target=housekeep, args=(table, stop), daemon=True,
                     name="housekeeping").start()
    logger.info("serving %d tasks on http://%s:%d (snapshots built by %d processes)", len(store),
                cfg.host, cfg.port, builder.processes)
    try:
        server.serve()
    finally:
        stop.set()
        builder.close()
        logger.info("mind2web server on port %d stopped", cfg.port)


if __name__ == "__main__":
    main()
