"""SIGTERM while a request is still encoding past the stop's grace: the server waits for the
batch in flight and exits 0 (it used to exit under the encoding thread: abort, exit -6). SIGTERM
while requests wait for the model: each is answered 503 `stopping` at once, the one encoding
gets its result, and the server exits 0 (the waiting ones used to get no answer at all).

The encoding is held by a file gate (`gated_server`), so the request outlasts the grace by
construction; every wait below is for an event, bounded.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import requests

from env.launch import config_arguments, start_server
from evolving_rl.config import Config, load_config

WAIT_S = 60.0


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.02)


@dataclass
class Gated:
    """A gated retrieval server (`tests.retrieval.gated_server`) this test started."""

    proc: subprocess.Popen
    url: str
    gate: Path
    log: Path


@contextlib.contextmanager
def gated_server(tmp_path: Path, cfg: Config) -> Iterator[Gated]:
    """Start the gated server of `cfg`; killed (by its PID) if the test leaves it running."""
    gate, log = tmp_path / "gate", tmp_path / "server.out"
    gate.mkdir()
    cmd = [sys.executable, "-m", "tests.retrieval.gated_server", str(gate),
           *config_arguments(cfg)]
    url = f"http://{cfg.retrieval.host}:{cfg.retrieval.port}"
    proc = start_server(cmd, f"{url}/health", log, cfg.retrieval.start_timeout_s)
    try:
        yield Gated(proc, url, gate, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)


def test_sigterm_during_a_request_past_the_grace_exits_0(tmp_path, prepared_dir, make_config,
                                                         config, cache):
    cfg = load_config(make_config(tmp_path, prepared_dir, cache_path=config.retrieval.cache_path))
    with gated_server(tmp_path, cfg) as server:
        proc, url, gate, log = server.proc, server.url, server.gate, server.log
        client = threading.Thread(target=lambda: _post_ignoring_disconnect(url), daemon=True)
        client.start()
        wait_until((gate / "started").exists, "the request reached the model")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: proc.poll() is not None or "closing the encoder" in log.read_text(),
                   "the server waits for the encoder after its grace")
        assert proc.poll() is None, f"exited {proc.returncode} under the running encode"
        (gate / "release").touch()
        assert proc.wait(WAIT_S) == 0, log.read_text()[-2000:]
        assert (gate / "finished").exists()
        assert "terminate called" not in log.read_text()


def test_sigterm_answers_every_request_waiting_for_the_model(tmp_path, prepared_dir,
                                                             make_config, config, cache):
    cfg = load_config(make_config(tmp_path, prepared_dir, threads=8,
                                  cache_path=config.retrieval.cache_path))
    with gated_server(tmp_path, cfg) as server, ThreadPoolExecutor(4) as pool:
        proc, url, gate = server.proc, server.url, server.gate
        running = pool.submit(_search, url, "a question the model reads first")
        wait_until((gate / "started").exists, "the first request reached the model")
        waiting = [pool.submit(_search, url, f"a question that waits {i}") for i in range(3)]
        wait_until(lambda: requests.get(f"{url}/health", timeout=WAIT_S).json()[
            "encoder_waiting"] == 3, "three requests wait for the model")
        proc.send_signal(signal.SIGTERM)
        answers = [future.result() for future in waiting]  # the model is still held
        assert [a.status_code for a in answers] == [503] * 3, [a.text for a in answers]
        assert all(a.json()["error"] == "stopping" and a.json()["field"] is None
                   for a in answers)
        (gate / "release").touch()
        assert running.result().status_code == 200, running.result().text
        assert proc.wait(WAIT_S) == 0, server.log.read_text()[-2000:]


def _search(url: str, text: str) -> requests.Response:
    return requests.post(f"{url}/search", json={"query": text, "k": 1}, timeout=WAIT_S)


def _post_ignoring_disconnect(url: str) -> None:
    """The server closes the connection at the end of its grace: no answer is expected."""
    try:
        requests.post(f"{url}/search", json={"query": "a question never seen", "k": 1},
                      timeout=WAIT_S)
    except requests.ConnectionError:
        pass
