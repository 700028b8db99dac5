"""Flask app factory of the probe env server: `/reset`, `/step`, `/close`, `/health`.

Owns the probe's wire contract and its episodes. `/reset {task}` (a task id of the prepared
splits) answers the episode view: `episode_id`, `task_id`, `task` (the question), `kind`,
`observation`, `answers`, `step` (0), `done` (false), `won` (false). `/step {episode_id, action}`
(a string; its stripped text is the chosen answer, anything but `1`..`M` a wrong one) ends the
episode: the view with `observation` = the feedback that reveals the winning answer, `step` 1,
`done` true, `won`, `answer` and `valid` (the action named an answer). Errors are the servers'
one JSON body (`env.wire`): 400 `bad_request` naming the field, 404 `unknown_task` (an id this
seed and config never generate) or `unknown_episode`, 409 `episode_done`, 503 `server_full` +
Retry-After (`env.episodes`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, jsonify

from env.episodes import EpisodeTable
from env.wire import WireError, json_app, read_json_object, string_field
from evolving_rl.config.schema import ProbeConfig
from evolving_rl.domains.probe_tasks import ProbeTask, task_for

MAX_ID_CHARS = 64
MAX_ACTION_CHARS = 256


@dataclass
class Episode:
    """One play of one task: a single answer ends it."""

    task: ProbeTask
    chosen: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def done(self) -> bool:
        return self.chosen is not None

    def view(self, episode_id: str) -> dict[str, Any]:
        task = self.task
        view: dict[str, Any] = {
            "episode_id": episode_id, "task_id": task.id, "task": task.question,
            "kind": task.kind, "answers": list(task.answers), "step": int(self.done),
            "done": self.done, "won": self.done and task.won(self.chosen or "")}
        if self.chosen is None:
            return {**view, "observation": task.observation()}
        return {**view, "observation": task.feedback(self.chosen), "answer": task.answer,
                "valid": self.chosen in task.answers}


def create_app(cfg: ProbeConfig, table: EpisodeTable[Episode]) -> Flask:
    """The server app over `table` (owned by the caller)."""
    app = json_app(__name__, cfg.max_body_bytes)

    @app.get("/health")
    def health() -> Response:
        return jsonify(status="ok", pid=os.getpid(), kind=cfg.kind, episodes=len(table),
                       evicted=table.evicted)

    @app.post("/reset")
    def reset() -> Response:
        task_id = string_field(read_json_object(), "task", MAX_ID_CHARS)
        task = task_for(cfg, task_id)
        if task is None:
            raise WireError(404, "unknown_task", f"no {cfg.kind} probe task {task_id!r} "
                            "under this seed and config", "task")
        episode = Episode(task)
        return jsonify(episode.view(table.add(episode)))

    @app.post("/step")
    def step() -> Response:
        body = read_json_object()
        episode_id = string_field(body, "episode_id", MAX_ID_CHARS)
        action = string_field(body, "action", MAX_ACTION_CHARS, required=False)
        episode = table.get(episode_id)
        with episode.lock:
            if episode.done:
                raise WireError(409, "episode_done", "the episode is over; close it",
                                "episode_id")
            episode.chosen = action.strip()
            return jsonify(episode.view(episode_id))

    @app.post("/close")
    def close() -> Response:
        episode_id = string_field(read_json_object(), "episode_id", MAX_ID_CHARS)
        table.pop(episode_id)
        return jsonify({"closed": episode_id})

    return app
