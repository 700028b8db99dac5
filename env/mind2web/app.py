"""Flask app factory of the Mind2Web env server: `/reset`, `/step`, `/close`, `/health`.

Owns the HTTP surface and the request validation of the wire contract (docs/reference.md
"Servers"): every client mistake is a 4xx JSON `{"error", "message", "field"}` naming the offending
field (a body that is not a JSON object, a wrong type, an unknown op, a malformed ref, an oversized
body), an unknown episode is 404, stepping a finished episode 409, a full server 503 + Retry-After.
A well-formed ref that names no element is not a client mistake: it is a wrong action.
"""

from __future__ import annotations

import os
import re
from typing import Any

from flask import Flask, Response, jsonify

from env.episodes import EpisodeTable
from env.mind2web.episodes import MODES, Episode, result_json
from env.mind2web.prepare import MAX_ID_CHARS
from env.mind2web.store import TaskKey, TaskStore
from env.mind2web.validate import OPS, Action
from env.wire import WireError, bad_field, json_app, read_json_object, string_field
from evolving_rl.config.schema import Mind2WebConfig

MAX_FILE_CHARS = 1024
MAX_VALUE_CHARS = 2000
REF = re.compile(r"e[1-9][0-9]{0,6}", re.ASCII)  # matched whole; ASCII digits only


def _task_key(store: TaskStore, body: dict[str, Any]) -> TaskKey:
    task = body.get("task")
    if isinstance(task, str):
        return store.locate_id(string_field(body, "task", MAX_ID_CHARS))
    if not isinstance(task, dict):
        raise bad_field("task", "must be an annotation id or {\"file\": ..., \"index\": N}")
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise bad_field("task.index", "must be a non-negative integer")
    return store.locate_file(string_field(task, "file", MAX_FILE_CHARS, field="task.file"), index)


def _mode(body: dict[str, Any]) -> str:
    mode = body.get("mode", "train")
    if mode not in MODES:
        raise bad_field("mode", f"must be one of {', '.join(MODES)}")
    return mode


def _action(body: dict[str, Any]) -> Action:
    action = body.get("action")
    if not isinstance(action, dict):
        raise bad_field("action", "must be an object {\"op\", \"ref\", \"value\"}")
    op = string_field(action, "op", 16, field="action.op").strip().upper()
    if op not in OPS:
        raise bad_field("action.op", f"must be one of {', '.join(sorted(OPS))}")
    ref = string_field(action, "ref", 16, field="action.ref").strip()
    if not REF.fullmatch(ref):
        raise bad_field("action.ref", "must be an element ref like e12")
    return Action(op, ref, string_field(action, "value", MAX_VALUE_CHARS, field="action.value",
                                       required=False))


def create_app(cfg: Mind2WebConfig, store: TaskStore, table: EpisodeTable[Episode]) -> Flask:
    """The server app over `store` and `table` (both owned by the caller)."""
    app = json_app(__name__, cfg.max_body_bytes)

    @app.get("/health")
    def health() -> Response:
        return jsonify(status="ok", pid=os.getpid(), episodes=len(table), tasks=len(store),
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
        episode_id = string_field(body, "episode_id", 64)
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
        episode_id = string_field(read_json_object(), "episode_id", 64)
        table.pop(episode_id)
        return jsonify({"closed": episode_id})

    return app
