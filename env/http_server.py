"""The waitress server every env server runs: limits that misbehaving clients cannot exhaust,
and JSON for the errors waitress answers itself.

Owns `make_server`. Waitress's defaults (100 connections, a connection idle for 120 s closed, a
check every 30 s) let about 100 clients that send headers and never the body lock every other
client out for two minutes. Every server here (Mind2Web, the ALFWorld router and workers,
retrieval) serves with:

- `CONNECTION_LIMIT` 1000 connections: about four times the most a run opens to one server
  (`clients.pool_size`, 256 per client session) — room for hundreds of stalled ones beside
  them. Connections are watched with poll(), which has no 1,024-descriptor ceiling; keep the
  open-file limit (`ulimit -n`) above this.
- `CHANNEL_TIMEOUT_S` 30 s: a connection that has sent nothing for that long and has no request
  running is closed (a half-sent body included). Longer than aiohttp's 15 s keep-alive, so that
  clients close their idle pooled connections first.
- `CLEANUP_INTERVAL_S` 5 s: how often idle connections are looked for.

A stalled connection holds no worker thread (waitress buffers a request until it is complete).
Errors waitress raises before the app sees a request (a body over `max_request_body_size`: 413,
malformed or oversized headers: 400 / 431) answer with the server's JSON error body
(`error_body(status, message)`), not waitress's plain text. `surrogate_field` finds the string
of a parsed body that holds a lone surrogate, which each server answers with a 400 naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from waitress import create_server
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, MultiSocketServer
from waitress.task import ErrorTask

CONNECTION_LIMIT = 1000
CHANNEL_TIMEOUT_S = 30
CLEANUP_INTERVAL_S = 5
ErrorBody = Callable[[int, str], dict[str, Any]]
SURROGATE_MESSAGE = "holds a lone surrogate (\\ud800-\\udfff), which no text may contain"
_SURROGATE = re.compile("[\ud800-\udfff]")


def wire_error_body(status: int, message: str) -> dict[str, Any]:
    """The `{"error", "message", "field"}` shape of the env servers' `WireError`."""
    if status == 413:
        return {"error": "body_too_large", "message": message, "field": "body"}
    return {"error": "headers_too_large" if status == 431 else "bad_request",
            "message": message}


def _channel_class(error_body: ErrorBody) -> type[HTTPChannel]:
    class JsonErrorTask(ErrorTask):
        def execute(self) -> None:
            error = self.request.error
            message = f"{error.reason}: {error.body}" if error.body else error.reason
            body = json.dumps(error_body(error.code, message)).encode()
            self.status = f"{error.code} {error.reason}"
            self.response_headers.append(("Content-Type", "application/json"))
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class JsonErrorChannel(HTTPChannel):
        error_task_class = JsonErrorTask

    return JsonErrorChannel


def make_server(app: Callable, *, host: str, port: int, threads: int, max_body_bytes: int,
                ident: str, error_body: ErrorBody = wire_error_body,
                **settings: Any) -> BaseWSGIServer | MultiSocketServer:
    """A waitress server for `app` with the limits above (`settings`: other waitress options);
    bodies over `max_body_bytes` are refused by waitress before they reach `app`."""
    server = create_server(app, host=host, port=port, threads=threads, ident=ident,
                           max_request_body_size=max_body_bytes,
                           connection_limit=CONNECTION_LIMIT, channel_timeout=CHANNEL_TIMEOUT_S,
                           cleanup_interval=CLEANUP_INTERVAL_S, asyncore_use_poll=True,
                           **settings)
    channel = _channel_class(error_body)
    listeners = ([server] if isinstance(server, BaseWSGIServer) else
                 [s for s in server.map.values() if isinstance(s, BaseWSGIServer)])
    for listener in listeners:
        listener.channel_class = channel
    return server


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
