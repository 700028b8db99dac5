"""ALFWorld router: one address for clients in front of N worker processes it supervises.

Owns the routing surface (a Flask app factory, served by waitress) and the router process:
it starts the workers (`pool`), health-checks and respawns them, places each reset on the
least-loaded healthy worker (the game's own worker when nearly as free; the next one when
full), and sends steps and closes to the worker named in the episode id — answering 410
"episode lost" at once for a worker that died, and 404 for an id naming a boot it never had.
Requests are validated here with the same wire types as the workers, so garbage stops at the door.

    python -m env.alfworld.router --config configs/alfworld.yaml   # usually via launch
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time

import urllib3
from flask import Flask, Response, jsonify, request

from env.alfworld.launch import pid_file
from env.alfworld.pool import WorkerHandle, WorkerPool, worker_command
from env.alfworld.wire import (
    MIN_RESET_TIMEOUT_S,
    CloseRequest,
    ResetRequest,
    StepRequest,
    deadline_passed,
    episode_worker,
    lost,
)
from env.http_server import make_server
from env.launch import (
    add_config_arguments,
    config_arguments,
    config_from_args,
    exit_on_sigterm,
    write_pid_file,
)
from env.wire import WireError, install_error_handlers, read_json_object, unknown_episode
from evolving_rl.config.schema import AlfworldConfig

logger = logging.getLogger(__name__)


class Upstream:
    """JSON POSTs to workers; connection failures become `None` (the caller decides)."""

    def __init__(self, http: urllib3.PoolManager) -> None:
        self._http = http

    def post(self, handle: WorkerHandle, path: str, payload: dict,
             timeout_s: float) -> tuple[int, bytes, dict[str, str]] | None:
        try:
            resp = self._http.request(
                "POST", f"{handle.url}{path}", body=json.dumps(payload).encode(), retries=False,
                headers={"Content-Type": "application/json"},
                timeout=urllib3.Timeout(connect=2.0, read=timeout_s))
        except urllib3.exceptions.HTTPError as err:
            logger.warning("worker %d %s failed: %r", handle.index, path, err)
            return None
        headers = {k: v for k, v in resp.headers.items() if k.lower() == "retry-after"}
        return resp.status, resp.data, headers


def _relay(result: tuple[int, bytes, dict[str, str]]) -> Response:
    status, data, headers = result
    return Response(data, status=status, headers=headers, mimetype="application/json")


def _client_gone() -> bool:
    check = request.environ.get("waitress.client_disconnected")
    return bool(check and check())


def _reset(cfg: AlfworldConfig, pool: WorkerPool, upstream: Upstream) -> Response:
    req = ResetRequest.parse(read_json_object())
    budget = min(req.timeout_s or cfg.reset_timeout_s, cfg.reset_timeout_s)
    deadline = time.monotonic() + budget
    tried: set[int] = set()
    while (handle := pool.place(tried, req.game)) is not None:
        tried.add(handle.index)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pool.placed(handle, False)
            raise deadline_passed()
        # A worker accepts no deadline under the minimum: at most that much past the client's.
        timeout = max(remaining, MIN_RESET_TIMEOUT_S)
        result = upstream.post(
            handle, "/reset", {"game": req.game, "timeout_s": timeout}, timeout + 1.0)
        started = result is not None and result[0] == 200
        busy = result is not None and result[0] == 503
        pool.placed(handle, started, full=busy and b'"worker_full"' in result[1])
        if result is None or busy:
            continue
        if started and _client_gone():
            episode_id = json.loads(result[1])["episode_id"]
            upstream.post(handle, "/close", {"episode_id": episode_id}, cfg.step_timeout_s)
            pool.closed(handle)
            logger.info("client left during reset; closed %s", episode_id)
        return _relay(result)
    raise WireError(503, "no_capacity", "no healthy worker has room for a new episode; retry",
                    retry_after_s=cfg.retry_after_s)


def _episode_call(cfg: AlfworldConfig, pool: WorkerPool, upstream: Upstream, path: str,
                  episode_id: str, payload: dict) -> Response:
    index, boot = episode_worker(episode_id)
    if index >= len(pool.workers):
        raise unknown_episode(episode_id)
    handle = pool.workers[index]
    if handle.boot != boot:
        raise lost(episode_id) if boot in handle.boots else unknown_episode(episode_id)
    result = upstream.post(handle, path, payload, cfg.step_timeout_s)
    if result is None:
        if pool.exited(handle):
            pool.declare_dead(handle, "exited")
            raise lost(episode_id)
        raise WireError(504, "worker_timeout", f"worker {index} did not answer in time")
    if path == "/close" and result[0] == 200:
        pool.closed(handle)
    return _relay(result)


def create_app(cfg: AlfworldConfig, pool: WorkerPool, upstream: Upstream) -> Flask:
    """The router app; `pool` (already started) and `upstream` are owned by the caller."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    install_error_handlers(app)

    @app.get("/health")
    def health() -> Response:
        resp = jsonify({"ok": pool.all_healthy(), "pid": os.getpid(),
                        "workers": [h.summary() for h in pool.workers]})
        resp.status_code = 200 if pool.all_healthy() else 503
        return resp

    @app.post("/reset")
    def reset() -> Response:
        return _reset(cfg, pool, upstream)

    @app.post("/step")
    def step() -> Response:
        req = StepRequest.parse(read_json_object())
        return _episode_call(cfg, pool, upstream, "/step", req.episode_id,
                             {"episode_id": req.episode_id, "action": req.action})

    @app.post("/close")
    def close() -> Response:
        req = CloseRequest.parse(read_json_object())
        return _episode_call(cfg, pool, upstream, "/close", req.episode_id,
                             {"episode_id": req.episode_id})

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    config = config_from_args(parser.parse_args(argv))
    cfg = config.alfworld
    logging.basicConfig(level=logging.INFO, format="%(asctime)s router %(levelname)s %(message)s")
    exit_on_sigterm()
    http = urllib3.PoolManager(maxsize=cfg.threads * 2, block=False)
    pool = WorkerPool(cfg, worker_command(config_arguments(config), os.getpid()), http)
    # Bound first: a router whose port is taken exits before any PID file or worker.
    server = make_server(create_app(cfg, pool, Upstream(http)), host=cfg.host, port=cfg.port,
                         threads=cfg.threads, max_body_bytes=cfg.max_body_bytes,
                         channel_request_lookahead=1, ident="alfworld-router")
    write_pid_file(pid_file(cfg, "router", cfg.port))
    try:
        pool.start_all()
        threading.Thread(target=pool.supervise, daemon=True, name="supervise").start()
        server.serve()
    finally:
        pool.stop_all()
        logger.info("router stopped")


if __name__ == "__main__":
    main()
