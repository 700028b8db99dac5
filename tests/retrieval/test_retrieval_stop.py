"""SIGTERM while a request is still encoding past the stop's grace: the server waits for the
batch in flight and exits 0 (it used to exit under the encoding thread: abort, exit -6).

The encoding is held by a file gate (`gated_server`), so the request outlasts the grace by
construction; every wait below is for an event, bounded.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import requests

from env.launch import config_arguments, start_server
from evolving_rl.config import load_config

WAIT_S = 60.0


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.02)


def test_sigterm_during_a_request_past_the_grace_exits_0(tmp_path, prepared_dir, make_config,
                                                         config, cache):
    cfg = load_config(make_config(tmp_path, prepared_dir, cache_path=config.retrieval.cache_path))
    gate, log = tmp_path / "gate", tmp_path / "server.out"
    gate.mkdir()
    cmd = [sys.executable, "-m", "tests.retrieval.gated_server", str(gate),
           *config_arguments(cfg)]
    url = f"http://{cfg.retrieval.host}:{cfg.retrieval.port}"
    proc = start_server(cmd, f"{url}/health", log, cfg.retrieval.start_timeout_s)
    try:
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
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)


def _post_ignoring_disconnect(url: str) -> None:
    """The server closes the connection at the end of its grace: no answer is expected."""
    try:
        requests.post(f"{url}/search", json={"query": "a question never seen", "k": 1},
                      timeout=WAIT_S)
    except requests.ConnectionError:
        pass
