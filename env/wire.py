"""The servers' JSON wire, shared by every server (env servers and retrieval): errors, request
bodies, string fields.

Owns `WireError` (an HTTP status, a stable machine-readable `code`, a message and the offending
`field`, answered as `{"error", "message", "field"}`: the one error body of every server,
waitress's own errors included; `field` is always present, null only where no field of the
request is at fault: no route (404), a method the route lacks (405), a request head waitress
cannot parse (400), no capacity (503 `no_capacity`), a server stopping (503 `stopping`)),
`read_json_object` (the body as a JSON object; a string holding a lone surrogate is a 400 naming
it: `surrogate_field`), `string_field` (a bounded string field, a 400 naming it otherwise),
`body_too_large_message` (the one 413 message), `install_error_handlers` (JSON bodies for
`WireError` and for Flask's own errors) and `json_app` (a server's Flask app with both: its body
limit, its JSON keys in the order written). Every client mistake a server sees
becomes a `WireError` with a 4xx status, so nothing a client sends reaches a server's logic
unvalidated. A server's own requests and views live in its package (`alfworld/wire.py`,
`mind2web/app.py`, `evolving_rl.retrieval.protocol`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

HTTP_ERROR_CODES = {404: "no_such_route", 405: "method_not_allowed", 413: "body_too_large",
                    431: "headers_too_large", 500: "internal_error"}
SURROGATE_MESSAGE = "holds a lone surrogate (\\ud800-\\udfff), which no text may contain"
_SURROGATE = re.compile("[\ud800-\udfff]")


def status_code(status: int) -> str:
    """The wire code of an HTTP error the server answers by itself (no route, a body too large)."""
    return HTTP_ERROR_CODES.get(status, "bad_request")


def body_too_large_message(max_body_bytes: int) -> str:
    """What every layer answers for a body over the server's one limit."""
    return f"body over {max_body_bytes} bytes"


class WireError(Exception):
    """A request the server refuses: HTTP status, machine-readable code, human message."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.retry_after_s = field, retry_after_s

    def json_bytes(self) -> bytes:
        body = {"error": self.code, "message": self.message, "field": self.field}
        return json.dumps(body).encode()

    def response(self) -> Response:
        resp = Response(self.json_bytes(), status=self.status, mimetype="application/json")
        if self.retry_after_s is not None:
            resp.headers["Retry-After"] = str(self.retry_after_s)
        return resp


def unknown_episode(episode_id: str) -> WireError:
    return WireError(404, "unknown_episode", f"no episode {episode_id} (closed, evicted after "
                     "its idle TTL, or never existed)", "episode_id")


def bad_field(field: str, message: str) -> WireError:
    return WireError(400, "bad_request", f"{field}: {message}", field)


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


def surrogate_field(body: dict[str, Any]) -> str | None:
    """The dotted path of the first string (value, or key: its container's path) holding a lone
    surrogate, else None (JSON `\\ud800` escapes decode to such strings, which no file name or
    text can hold). Iterative: nesting is bounded only by the body size."""
    pending: list[tuple[Any, str]] = [(body, "")]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path
            continue
        items = (value.items() if isinstance(value, dict)
                 else enumerate(value) if isinstance(value, list) else ())
        for key, item in items:
            if isinstance(key, str) and _SURROGATE.search(key):
                return path
            pending.append((item, f"{path}.{key}" if path else str(key)))
    return None


def string_field(container: dict[str, Any], key: str, max_chars: int, *,
                 field: str | None = None, required: bool = True) -> str:
    """`container[key]`: a string of at most `max_chars`, not blank when `required` (an absent
    optional one reads ""), else a 400 naming `field` (the body's path to it; default `key`)."""
    field = field or key
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


def install_error_handlers(app: Flask) -> None:
    """JSON bodies for our errors and for Flask's own (404 route, 405, 413 body over the app's
    `MAX_CONTENT_LENGTH`)."""

    @app.errorhandler(WireError)
    def _wire(err: WireError) -> Response:
        return err.response()

    @app.errorhandler(HTTPException)
    def _http(err: HTTPException) -> Response:
        status = err.code or 400
        if status == 413:
            return WireError(413, "body_too_large",
                             body_too_large_message(app.config["MAX_CONTENT_LENGTH"]),
                             "body").response()
        return WireError(status, status_code(status), err.description or err.name).response()


def json_app(import_name: str, max_body_bytes: int) -> Flask:
    """A server's Flask app: bodies over `max_body_bytes` refused (413), every error one JSON
    body (`install_error_handlers`), JSON answers with their keys in the order written."""
    app = Flask(import_name)
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.json.sort_keys = False
    install_error_handlers(app)
    return app
