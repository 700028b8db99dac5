"""The ALFWorld servers' HTTP wire: typed requests and responses, validation, JSON errors.

Owns what router and worker both accept and answer (and the Mind2Web server reads its bodies with
`read_json_object` too). Every client mistake becomes a `WireError` with a 4xx status, a stable
`code` and the offending `field` (a string holding a lone surrogate included); nothing a client
sends reaches the engine unvalidated. Episode ids name their worker and its boot
(`<worker>-<boot>-<hex>`), so the router routes without a table and an id from a worker that
has since restarted is "episode lost".
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from env.http_server import SURROGATE_MESSAGE, surrogate_field

MAX_ACTION_CHARS = 1000
MAX_GAME_CHARS = 1024
EPISODE_ID = re.compile(r"^(\d{1,4})-([0-9a-f]{8})-([0-9a-f]{16})$")


class WireError(Exception):
    """A request the server refuses: HTTP status, machine-readable code, human message."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.retry_after_s = field, retry_after_s

    def response(self) -> Response:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        resp = jsonify(body)
        resp.status_code = self.status
        if self.retry_after_s is not None:
            resp.headers["Retry-After"] = str(self.retry_after_s)
        return resp


def bad_field(field: str, message: str) -> WireError:
    return WireError(400, "bad_request", f"{field}: {message}", field)


def lost(episode_id: str) -> WireError:
    return WireError(410, "episode_lost", f"episode {episode_id} was lost: its worker restarted "
                     "(start a new episode)", "episode_id")


def unknown(episode_id: str) -> WireError:
    return WireError(404, "unknown_episode", f"no episode {episode_id} (closed, evicted after "
                     "its idle TTL, or never existed)", "episode_id")


def read_json_object() -> dict[str, Any]:
    """The request body as a JSON object, or a 400 naming the problem."""
    raw = request.get_data(cache=False)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # ValueError covers bad JSON and bad UTF-8
        raise WireError(400, "malformed_json", "body is not valid JSON", "body") from None
    if not isinstance(body, dict):
        raise WireError(400, "malformed_json", "body must be a JSON object", "body")
    field = surrogate_field(body)
    if field is not None:
        raise bad_field(field or "body", SURROGATE_MESSAGE)
    return body


def _string(body: dict[str, Any], field: str, max_chars: int) -> str:
    if field not in body:
        raise bad_field(field, "missing")
    value = body[field]
    if not isinstance(value, str):
        raise bad_field(field, f"must be a string, got {type(value).__name__}")
    if not value.strip() or len(value) > max_chars:
        raise bad_field(field, f"must be a non-empty string of at most {max_chars} characters")
    return value


def _episode_id(body: dict[str, Any]) -> str:
    value = _string(body, "episode_id", 64)
    if not EPISODE_ID.match(value):
        raise unknown(value)
    return value


def episode_worker(episode_id: str) -> tuple[int, str]:
    """(worker index, worker boot) encoded in a validated episode id."""
    match = EPISODE_ID.match(episode_id)
    assert match is not None  # ids reach here validated
    return int(match.group(1)), match.group(2)


@dataclass(frozen=True)
class ResetRequest:
    """Start an episode of `game` (path relative to the data root); `timeout_s`: the client's
    deadline — an episode ready after it is dropped, never left orphaned."""

    game: str
    timeout_s: float | None = None

    @classmethod
    def parse(cls, body: dict[str, Any]) -> ResetRequest:
        timeout = body.get("timeout_s")
        if timeout is not None and (isinstance(timeout, bool) or
                                    not isinstance(timeout, (int, float)) or
                                    not 0 < timeout <= 3600):
            raise bad_field("timeout_s", "must be a number of seconds in (0, 3600]")
        return cls(_string(body, "game", MAX_GAME_CHARS), timeout)


@dataclass(frozen=True)
class StepRequest:
    episode_id: str
    action: str

    @classmethod
    def parse(cls, body: dict[str, Any]) -> StepRequest:
        return cls(_episode_id(body), _string(body, "action", MAX_ACTION_CHARS))


@dataclass(frozen=True)
class CloseRequest:
    episode_id: str

    @classmethod
    def parse(cls, body: dict[str, Any]) -> CloseRequest:
        return cls(_episode_id(body))


@dataclass(frozen=True)
class EpisodeView:
    """What reset and step answer."""

    episode_id: str
    observation: str
    admissible_commands: list[str]
    won: bool
    done: bool
    steps: int
    task: str
    task_type: str
    game: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def install_error_handlers(app: Flask) -> None:
    """JSON bodies for our errors and for Flask's own (404 route, 405, 413 body too large)."""

    @app.errorhandler(WireError)
    def _wire(err: WireError) -> Response:
        return err.response()

    @app.errorhandler(HTTPException)
    def _http(err: HTTPException) -> Response:
        code = {413: "body_too_large", 404: "no_such_route", 405: "method_not_allowed"}
        return WireError(err.code or 400, code.get(err.code or 400, "bad_request"),
                         err.description or err.name).response()
