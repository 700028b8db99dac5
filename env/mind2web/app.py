"""Flask app factory of the Mind2Web env server: `/reset`, `/step`, `/close`, `/health`.

Owns the HTTP surface and the request validation of the wire contract (README "Servers"): every
client mistake is a 4xx JSON `{"error", "message", "field"}` naming the offending field (a body
that is not a JSON object, a wrong type, an unknown op, a malformed ref, an oversized body), an
unknown episode is 404, stepping a finished episode 409, a full server 503 + Retry-After. A
well-formed ref that names no element is not a client mistake: it is a wrong action.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from env.alfworld.wire import WireError, bad_field, read_json_object
from env.mind2web.episodes import MODES, Episode, EpisodeTable, result_json
from env.mind2web.store import TaskKey, TaskStore
from env.mind2web.validate import OPS, Action
from evolving_rl.config.schema import Mind2WebConfig

MAX_ID_CHARS = 256
MAX_FILE_CHARS = 1024
MAX_VALUE_CHARS = 2000
REF = re.compile(r"^e[1-9]\d{0,6}$")


def _string(container: dict[str, Any], key: str, field: str, max_chars: int,
            required: bool = True) -> str:
    if key not in container and not required:
        return ""
    if key not in container:
        raise bad_field(field, "missing")
    value = container[key]
    if not isinstance(value, str):
        raise bad_field(field, f"must be a string, got {type(value).__name__}")
    if len(value) > max_chars or (required and not value.strip()):
        raise bad_field(field, f"must be a non-empty string of at most {max_chars} characters")
    return value


def _task_key(store: TaskStore, body: dict[str, Any]) -> TaskKey:
    task = body.get("task")
    if isinstance(task, str):
        return store.locate_id(_string(body, "task", "task", MAX_ID_CHARS))
    if not isinstance(task, dict):
        raise bad_field("task", "must be an annotation id or {\"file\": ..., \"index\": N}")
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise bad_field("task.index", "must be a non-negative integer")
    return store.locate_file(_string(task, "file", "task.file", MAX_FILE_CHARS), index)


def _mode(body: dict[str, Any]) -> str:
    mode = body.get("mode", "train")
    if mode not in MODES:
        raise bad_field("mode", f"must be one of {', '.join(MODES)}")
    return mode


def _action(body: dict[str, Any]) -> Action:
    action = body.get("action")
    if not isinstance(action, dict):
        raise bad_field("action", "must be an object {\"op\", \"ref\", \"value\"}")
    op = _string(action, "op", "action.op", 16).strip().upper()
    if op not in OPS:
        raise bad_field("action.op", f"must be one of {', '.join(sorted(OPS))}")
    ref = _string(action, "ref", "action.ref", 16).strip()
    if not REF.match(ref):
        raise bad_field("action.ref", "must be an element ref like e12")
    return Action(op, ref, _string(action, "value", "action.value", MAX_VALUE_CHARS, False))


def _errors(app: Flask, cfg: Mind2WebConfig) -> None:
    @app.errorhandler(WireError)
    def _wire(err: WireError) -> Response:
        return err.response()

    @app.errorhandler(HTTPException)
    def _http(err: HTTPException) -> Response:
        status = err.code or 400
        if status == 413:
            return WireError(413, "body_too_large", f"body over {cfg.max_body_bytes} bytes",
                             "body").response()
        names = {404: "no_such_route", 405: "method_not_allowed"}
        return WireError(status, names.get(status, "bad_request"),
                         err.description or err.name).response()


def create_app(cfg: Mind2WebConfig, store: TaskStore, table: EpisodeTable) -> Flask:
    """The server app over `store` and `table` (both owned by the caller)."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.json.sort_keys = False
    _errors(app, cfg)

    @app.get("/health")
    def health() -> Response:
        return jsonify(status="ok", episodes=len(table), tasks=len(store),
                       evicted=table.evicted)

    @app.post("/reset")
    def reset() -> Response:
        body = read_json_object()
        episode = Episode(_task_key(store, body), _mode(body), cfg.empty_positive_rule)
        if not store.task(episode.key).steps:
            raise WireError(422, "empty_task", "the task has no steps", "task")
        episode_id = table.add(episode)
        return jsonify(episode.view(store, episode_id))

    @app.post("/step")
    def step() -> Response:
        body = read_json_object()
        episode_id = _string(body, "episode_id", "episode_id", 64)
        action = _action(body)
        episode = table.get(episode_id)
        with episode.lock:
            if episode.done:
                raise WireError(409, "episode_done", "the episode is over; close it",
                                "episode_id")
            result = episode.act(store, action)
            view = episode.view(store, episode_id)
        return jsonify({**view, "result": result_json(result)})

    @app.post("/close")
    def close() -> Response:
        episode_id = _string(read_json_object(), "episode_id", "episode_id", 64)
        table.pop(episode_id)
        return jsonify({"closed": episode_id})

    return app
