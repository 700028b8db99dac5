"""The waitress server every server runs: limits no client can exhaust, one JSON error body,
and a stop that finishes the requests in flight.

Owns `make_server` and `Server`. Every server here (Mind2Web, the ALFWorld router and workers,
retrieval) serves with:

- `CONNECTION_LIMIT` 1000 open connections: about four times the most a run opens to one
  server (`clients.pool_size`, 256 per client session). At the limit a new connection is still
  accepted: the quietest connections that have no request running (an idle keep-alive, one still
  sending its request) are closed to make room, `SHED_BATCH` at a time, so clients that hold
  connections without using them cannot lock others out. Connections are watched with poll(),
  which has no 1,024-descriptor ceiling; the soft open-file limit is raised to hold them (a
  lower hard limit lowers the connection limit, with a warning).
- `HEADERS_TIMEOUT_S` 10 s: a connection that has not sent a request's headers that long after
  the request's first byte (or, for its first request, after it opened) is closed, trickling or
  not; `REQUEST_TIMEOUT_S` 30 s: the same for the whole request, body included.
- `CHANNEL_TIMEOUT_S` 30 s: an idle connection (no request running, nothing sent for that long)
  is closed. Longer than aiohttp's 15 s keep-alive, so that clients close their idle pooled
  connections first. `CLEANUP_INTERVAL_S` 2 s: how often these deadlines are checked.
- one body limit, `max_body_bytes`: waitress refuses a longer body before the app sees it (413),
  the app (Flask's `MAX_CONTENT_LENGTH`, set by the caller to the same number) refuses the rest,
  and both answer `body_too_large` "body over N bytes" (`body_too_large_message`).
- `STOP_GRACE_S` 5 s: `Server.serve` turns SIGTERM into a stop that accepts the connections
  already waiting in the listening socket's backlog, closes it, closes the connections with
  nothing sent at once, lets the requests already sent (read, partly read or waiting unread)
  finish and their answers go out for up to that long, then exits (the launchers' SIGKILL
  comes after `stop_timeout_s`, 10 s).

A stalled connection holds no worker thread (waitress buffers a request until it is complete).
Errors waitress answers itself (413, malformed or oversized headers: 400 / 431) carry the
wire's JSON error body (`env.wire.WireError`), like every error the apps answer; its `field` is
`body` (413), `headers` (431) or null (400: a request head that cannot be parsed).
"""

from __future__ import annotations

import heapq
import logging
import resource
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher

from env.wire import WireError, body_too_large_message, status_code

logger = logging.getLogger(__name__)

CONNECTION_LIMIT = 1000
SHED_BATCH = 50
HEADERS_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
CHANNEL_TIMEOUT_S = 30
CLEANUP_INTERVAL_S = 2
STOP_GRACE_S = 5.0
_POLL_S = 0.5
_FILES_SPARE = 64  # descriptors besides connections: logs, pipes, the listening socket


class _ErrorTask(ErrorTask):
    """Waitress's own errors as the wire's JSON body."""

    def execute(self) -> None:
        error = self.request.error
        if error.code == 413:
            message = body_too_large_message(self.channel.adj.max_request_body_size - 1)
        else:
            message = f"{error.reason}: {error.body}" if error.body else error.reason
        field = {413: "body", 431: "headers"}.get(error.code)
        body = WireError(error.code, status_code(error.code), message, field).json_bytes()
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class _Channel(HTTPChannel):
    """A connection that knows since when it has been reading a request (wall clock, as
    waitress's `last_activity`): None while it has no partial request."""

    error_task_class = _ErrorTask

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading_since: float | None = self.creation_time

    def received(self, data: bytes) -> bool:
        if self.request is None and self.reading_since is None:
            self.reading_since = time.time()
        done = super().received(data)
        if self.request is None:
            self.reading_since = None
        return done

    def idle(self) -> bool:
        """No request running or queued, no answer left to send, not closing already."""
        return not (self.requests or self.total_outbufs_len or self.will_close
                    or self.close_when_flushed)

    def settled(self) -> bool:
        """Nothing left for a stop to wait for: idle, no request partly read, no bytes unread."""
        return self.idle() and self.request is None and not _has_input(self.socket)

    def quiet_since(self) -> float:
        return self.last_activity if self.reading_since is None else self.reading_since

    def overdue(self, now: float) -> bool:
        """Still reading a request past its headers' or its whole deadline."""
        if self.reading_since is None or not self.idle():
            return False
        headers_done = self.request is not None and self.request.headers_finished
        bound = REQUEST_TIMEOUT_S if headers_done else HEADERS_TIMEOUT_S
        return now - self.reading_since > bound


class _Listener(TcpWSGIServer):
    """Accepts every connection, shedding quiet ones at `CONNECTION_LIMIT`; closes overdue ones."""

    channel_class = _Channel
    limit = CONNECTION_LIMIT
    shed = 0

    def readable(self) -> bool:
        accepting = super().readable()  # runs `maintenance`; waitress's own limit is never met
        if accepting and len(self._map) >= self.limit:
            return self._make_room()
        return accepting

    def _make_room(self) -> bool:
        """Mark the quietest idle connections to close (they close in this loop pass); False
        when every connection is busy (then none is accepted until one ends)."""
        channels = list(self.active_channels.values())
        closing = sum(1 for ch in channels if ch.will_close)
        if len(self._map) - closing < self.limit:
            return True
        victims = heapq.nsmallest(SHED_BATCH, (ch for ch in channels if ch.idle()),
                                  key=_Channel.quiet_since)
        for channel in victims:
            channel.will_close = True
        self.shed += len(victims)
        return bool(victims)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        overdue = [ch for ch in self.active_channels.values() if ch.overdue(now)]
        for channel in overdue:
            channel.will_close = True
        if overdue or self.shed:
            logger.warning("closed %d connections past their request deadline and %d quiet ones "
                           "at the connection limit (%d open)", len(overdue), self.shed,
                           len(self.active_channels))
        self.shed = 0


def _connection_limit() -> int:
    """`CONNECTION_LIMIT`, the soft open-file limit raised to hold it (up to the hard limit);
    lower only where the hard limit is (then accepting never fails for want of a descriptor)."""
    needed = CONNECTION_LIMIT + SHED_BATCH + _FILES_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return CONNECTION_LIMIT
    soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    limit = min(CONNECTION_LIMIT, soft - SHED_BATCH - _FILES_SPARE)
    if limit < CONNECTION_LIMIT:
        logger.warning("open-file hard limit %d: at most %d connections", hard, limit)
    return limit


class Server:
    """One app's listening sockets, connections and worker threads; `serve` runs it."""

    def __init__(self, adj: Adjustments, app: Callable, ident: str, limit: int) -> None:
        self.map: dict[int, wasyncore.dispatcher] = {}
        self.dispatcher = ThreadedTaskDispatcher()
        self.dispatcher.set_thread_count(adj.threads)
        self.listeners = [_Listener(app, self.map, dispatcher=self.dispatcher, adj=adj,
                                    sockinfo=sockinfo) for sockinfo in adj.listen]
        for listener in self.listeners:
            listener.limit = limit
        self.ident = ident
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Ask `serve` to stop (safe from a signal handler or another thread)."""
        self._stopping.set()
        self.listeners[0].pull_trigger()

    def serve(self, on_stop: Callable[[], None] | None = None) -> None:
        """Serve until `stop` (SIGTERM calls it, in the main thread), then call `on_stop` (what
        the app must do for its requests in flight to end within the grace: retrieval refuses
        the model's next batches), finish the requests in flight for up to `STOP_GRACE_S` and
        close everything."""
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, lambda *_: self.stop())
        try:
            while not self._stopping.is_set():
                wasyncore.poll2(_POLL_S, self.map)
            if on_stop is not None:
                on_stop()
            self._drain()
        finally:
            self.dispatcher.shutdown(timeout=1)
            wasyncore.close_all(self.map)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _drain(self) -> None:
        for listener in self.listeners:  # the listening socket only: tasks still pull triggers
            _accept_backlog(listener)
            wasyncore.dispatcher.close(listener)
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            channels = [ch for listener in self.listeners
                        for ch in listener.active_channels.values()]
            busy = 0
            for channel in channels:
                if channel.settled():
                    channel.will_close = True
                else:
                    busy += 1
            if not busy or time.monotonic() >= deadline:
                break
            wasyncore.poll2(0.05, self.map)
        logger.info("%s stopping: %d connections still had a request to read or run or an "
                    "answer to send (grace %.0f s)", self.ident, busy, STOP_GRACE_S)


def _has_input(sock: Any) -> bool:
    """Whether `sock` has bytes (or an end) waiting to be read, without waiting."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _accept_backlog(listener: _Listener) -> None:
    """Accept every connection waiting in the listening socket's backlog (the loop accepts one
    per pass): their requests were sent before the stop and are answered in the grace."""
    for _ in range(listener.adj.backlog):
        if not _has_input(listener.socket):
            return
        listener.handle_accept()


def make_server(app: Callable, *, host: str, port: int, threads: int, max_body_bytes: int,
                ident: str, **settings: Any) -> Server:
    """A server for `app` with the limits above (`settings`: other waitress options); bodies
    over `max_body_bytes` are refused by waitress before they reach `app`."""
    limit = _connection_limit()
    adj = Adjustments(host=host, port=port, threads=threads, ident=ident,
                      max_request_body_size=max_body_bytes + 1,  # waitress refuses >= this
                      connection_limit=2 * limit, channel_timeout=CHANNEL_TIMEOUT_S,
                      cleanup_interval=CLEANUP_INTERVAL_S, asyncore_use_poll=True, **settings)
    return Server(adj, app, ident, limit)
