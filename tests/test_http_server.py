"""The servers' shared scaffold (env/http_server.py) as a real process over real HTTP: normal
clients are answered while 2,000 hostile loopback connections are held open, connections that
never finish their request are closed, one body limit answered alike by every layer, and SIGTERM
lets the requests in flight finish (within the grace) before the process exits."""

from __future__ import annotations

import importlib
import json
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from env.http_server import STOP_GRACE_S
from env.launch import free_port, start_server, stop_process
from tests.fakes.http_app import MAX_BODY, MAX_HEADER_BYTES
from tests.servers import (
    HOSTILE,
    _closed_by_server,
    _hostile,
    health_probe,
    normal_requests_under_hostile_connections,
)

HEADERS_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 4.0
CLEANUP_S = 2.0  # env.http_server.CLEANUP_INTERVAL_S


def _start(tmp_path, *extra: str):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "tests.fakes.http_app", "--port", str(port),
           "--headers-timeout", str(HEADERS_TIMEOUT_S),
           "--request-timeout", str(REQUEST_TIMEOUT_S), *extra]
    return start_server(cmd, f"{url}/health", tmp_path / f"fake-{port}.log", timeout_s=60), url


@pytest.fixture
def fake(tmp_path):
    proc, url = _start(tmp_path)
    yield proc, url
    stop_process(proc)


def test_normal_clients_are_answered_under_2000_hostile_connections(fake):
    _, url = fake
    run = normal_requests_under_hostile_connections(url, health_probe(url), seconds=12)
    assert run.opened == {"idle": 667, "headers": 667, "body": 666}
    assert run.normal >= 10 and run.answered == run.normal, run
    assert run.closed_by_server == run.opened, run  # every one past its deadline, or shed
    assert sum(run.opened.values()) == HOSTILE


def test_a_low_open_file_limit_lowers_the_connection_limit_and_still_serves(tmp_path):
    """Hard limit 512: at most 398 connections, and never an accept failing for a descriptor."""
    proc, url = _start(tmp_path, "--open-files", "512")
    try:
        run = normal_requests_under_hostile_connections(url, health_probe(url), seconds=6)
    finally:
        stop_process(proc)
    assert run.normal >= 5 and run.answered == run.normal, run
    log = next(tmp_path.glob("fake-*.log")).read_text(encoding="utf-8")
    assert "open-file hard limit 512: at most 398 connections" in log
    assert "Too many open files" not in log


def test_a_connection_that_never_finishes_its_request_is_closed(fake):
    _, url = fake
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    start = time.monotonic()
    slow = {kind: _hostile(address, kind) for kind in ("idle", "headers", "body")}
    closed: dict[str, float] = {}
    while len(closed) < len(slow) and time.monotonic() - start < 30:
        for kind, sock in slow.items():
            if kind not in closed and _closed_by_server(sock):
                closed[kind] = time.monotonic() - start
            elif kind != "idle" and kind not in closed:
                sock.send(b"x")  # trickling: never quiet long enough for the idle timeout
        time.sleep(0.2)
    for sock in slow.values():
        sock.close()
    assert closed.keys() == slow.keys(), closed
    assert closed["idle"] < HEADERS_TIMEOUT_S + CLEANUP_S + 3, closed
    assert closed["headers"] < HEADERS_TIMEOUT_S + CLEANUP_S + 3, closed
    assert closed["body"] < REQUEST_TIMEOUT_S + CLEANUP_S + 3, closed


def test_one_body_limit_named_alike_by_every_layer(fake):
    _, url = fake
    padding = MAX_BODY - len(json.dumps({"p": ""}))
    exact = json.dumps({"p": "x" * padding}).encode()
    assert len(exact) == MAX_BODY
    assert requests.post(f"{url}/echo", data=exact, timeout=10).status_code == 200
    over = exact + b" "
    expected = {"error": "body_too_large", "message": f"body over {MAX_BODY} bytes",
                "field": "body"}
    for body in (over, iter([over[:100], over[100:]])):  # Content-Length, then chunked
        resp = requests.post(f"{url}/echo", data=body, timeout=10)
        assert resp.status_code == 413 and resp.json() == expected, resp.text


def _raw_answer(url: str, request: bytes) -> tuple[int, dict]:
    """Send `request` as it is (no client library would) and read the one answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_every_error_body_names_its_field_or_null(fake):
    """Flask's own errors and waitress's carry `field` too: null where no field is at fault."""
    _, url = fake
    no_route = requests.get(f"{url}/nowhere", timeout=10)
    assert no_route.status_code == 404
    assert no_route.json() == {"error": "no_such_route", "message": no_route.json()["message"],
                               "field": None}
    method = requests.get(f"{url}/echo", timeout=10)
    assert method.status_code == 405 and method.json()["error"] == "method_not_allowed"
    assert "field" in method.json() and method.json()["field"] is None
    host = url.removeprefix("http://").encode()
    bad_head = b"POST /echo HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: x\r\n\r\n"
    status, body = _raw_answer(url, bad_head)
    assert status == 400 and body["error"] == "bad_request"
    assert "field" in body and body["field"] is None, body
    huge = (b"GET /health HTTP/1.1\r\nHost: " + host + b"\r\nX-Pad: "
            + b"x" * (2 * MAX_HEADER_BYTES) + b"\r\n\r\n")
    status, body = _raw_answer(url, huge)
    assert status == 431 and body["error"] == "headers_too_large" and body["field"] == "headers"


def test_sigterm_finishes_the_requests_in_flight(tmp_path):
    """Under load: 16 requests running on the 16 threads and 16 more received, waiting for one
    (waitress's own stop cancelled those 16). Two waves of 1.5 s fit the grace with room."""
    proc, url = _start(tmp_path, "--threads", "16")
    with ThreadPoolExecutor(32) as pool:
        answers = [pool.submit(requests.get, f"{url}/slow", params={"s": 1.5}, timeout=30)
                   for _ in range(32)]
        time.sleep(1.0)  # all 32 received by now, the first 16 running
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        with pytest.raises(requests.ConnectionError):  # no longer accepting
            requests.get(f"{url}/health", timeout=5)
        results = [answer.result() for answer in answers]
    assert [r.status_code for r in results] == [200] * 32
    assert all(r.json() == {"slept": 1.5} for r in results)
    assert proc.wait(STOP_GRACE_S + 5) == 0


def test_sigterm_stops_within_the_grace_when_a_request_outlasts_it(tmp_path):
    proc, url = _start(tmp_path)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(requests.get, f"{url}/slow", params={"s": 60}, timeout=90)
        time.sleep(0.5)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_GRACE_S + 10) == 0
        assert time.monotonic() - start < STOP_GRACE_S + 5
        with pytest.raises(requests.ConnectionError):
            pending.result()



@pytest.mark.parametrize("module", ["env.mind2web.server", "env.alfworld.router",
                                    "env.alfworld.worker", "env.retrieval.server"])
def test_every_server_serves_with_the_scaffolds_stop(module):
    """What the tests above show of the scaffold holds for each server: each runs `serve`."""
    source = Path(importlib.import_module(module).__file__).read_text(encoding="utf-8")
    assert "make_server(" in source and ".serve(" in source and ".run()" not in source
