"""ALFWorld worker server: live TextWorld episodes behind `/health`, `/reset`, `/step`, `/close`.

Owns the worker's HTTP surface (a Flask app factory, served by waitress) and its process life:
PID file (written once its port is bound), housekeeping thread (idle-TTL eviction; exit when
the supervising router is gone), and a clean stop on SIGTERM (translator process included). One
worker = one engine lock; run several workers (the router does) for parallelism.

    python -m env.alfworld.worker --config configs/alfworld.yaml --index 0
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from flask import Flask, Response, jsonify, request

from env.alfworld.engine import Engine
from env.alfworld.episodes import Slot, WorkerEpisodes, task_text
from env.alfworld.games import resolve_game
from env.alfworld.launch import pid_file
from env.alfworld.wire import CloseRequest, ResetRequest, StepRequest
from env.episodes import housekeep
from env.http_server import make_server
from env.launch import add_config_arguments, config_from_args, exit_on_sigterm, write_pid_file
from env.wire import WireError, install_error_handlers, read_json_object
from evolving_rl.config.schema import AlfworldConfig

logger = logging.getLogger(__name__)


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _client_gone() -> bool:
    check = request.environ.get("waitress.client_disconnected")
    return bool(check and check())


def _reset(cfg: AlfworldConfig, root: Path, engine: Engine, table: WorkerEpisodes) -> Response:
    req = ResetRequest.parse(read_json_object())
    game = resolve_game(root, req.game)
    budget = min(req.timeout_s or cfg.reset_timeout_s, cfg.reset_timeout_s)
    deadline = time.monotonic() + budget
    table.reserve()
    try:
        episode = engine.new_episode(game, budget)
    except BaseException:
        table.unreserve()
        raise
    slot = Slot(episode, game.key, game.task_type, task_text(episode.observation))
    wanted = time.monotonic() <= deadline and not _client_gone()
    episode_id = table.admit(slot, wanted)
    if episode_id is None:
        logger.info("reset of %s finished after its client left; episode dropped", game.key)
        raise WireError(408, "reset_abandoned", "the reset finished after the client's "
                        "deadline; no episode was kept", "timeout_s")
    return jsonify(slot.view(episode_id).to_json())


def create_app(cfg: AlfworldConfig, engine: Engine, table: WorkerEpisodes) -> Flask:
    """The worker app; `engine` and `table` are owned by the caller."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    root = Path(cfg.data_root).resolve()
    install_error_handlers(app)

    @app.get("/health")
    def health() -> Response:
        body: dict[str, Any] = {
            "ok": True, "worker": table.worker_index, "boot": table.boot, "pid": os.getpid(),
            "live_episodes": len(table), "reserved": table.reserved,
            "capacity": cfg.capacity, "cached_games": engine.cached_games,
            "translations": engine.translations, "translator_jobs": engine.translator_jobs,
            "translations_ready": engine.translations_ready,
            "translations_dropped": engine.translations_dropped,
            "evicted": table.evicted,
            "dropped_resets": table.dropped_resets, "rss_bytes": rss_bytes(),
            "translator_pids": engine.translator_pids()}
        return jsonify(body)

    @app.post("/reset")
    def reset() -> Response:
        return _reset(cfg, root, engine, table)

    @app.post("/step")
    def step() -> Response:
        req = StepRequest.parse(read_json_object())
        slot = table.get(req.episode_id)
        engine.step(slot.episode, req.action)
        slot.steps += 1
        return jsonify(slot.view(req.episode_id).to_json())

    @app.post("/close")
    def close() -> Response:
        req = CloseRequest.parse(read_json_object())
        table.pop(req.episode_id)
        return jsonify({"closed": req.episode_id})

    return app


def _router_alive(parent_pid: int | None) -> bool:
    """False, after asking this worker to stop, once the router that started it is gone."""
    if parent_pid is None or os.getppid() == parent_pid:
        return True
    logger.warning("router (pid %d) is gone; stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)
    return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=None)
    args = parser.parse_args(argv)
    cfg = config_from_args(args).alfworld
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s worker-{args.index} %(levelname)s %(message)s")
    exit_on_sigterm()
    engine = Engine(cfg.translation_cache_games)
    table = WorkerEpisodes(args.index, cfg.capacity, cfg.episode_ttl_s,
                           cfg.retry_after_s)
    stop = threading.Event()
    try:
        # Bound first: a worker whose port is taken exits before touching any PID file.
        port = cfg.worker_base_port + args.index
        server = make_server(create_app(cfg, engine, table), host=cfg.host, port=port,
                             threads=cfg.threads, max_body_bytes=cfg.max_body_bytes,
                             channel_request_lookahead=1, ident="alfworld-worker")
        write_pid_file(pid_file(cfg, "worker", port))
        threading.Thread(target=housekeep, daemon=True, name="housekeeping",
                         args=(table, stop, lambda: _router_alive(args.parent_pid))).start()
        server.serve()
    finally:
        stop.set()
        engine.shutdown()
        logger.info("worker %d stopped", args.index)


if __name__ == "__main__":
    main()
