"""Launcher safety: only the PID a server wrote is stopped; a failed start names its log."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from env.launch import LaunchError, config_arguments, start_server, stop_pid_file
from env.retrieval.launcher import start_retrieval_server, stop_retrieval_server
from evolving_rl.config import load_config


def test_stale_pid_file_of_another_program_is_not_signalled(tmp_path):
    pid_path = tmp_path / "retrieval-1.pid"
    pid_path.write_text(f"{os.getpid()}\n")  # this pytest process, not a retrieval server
    assert stop_pid_file(pid_path, "env.retrieval") is False
    assert not pid_path.exists()
    assert stop_pid_file(tmp_path / "missing.pid", "env.retrieval") is False


def test_server_that_cannot_start_is_reported_with_its_log(tmp_path, prepared_dir, make_config):
    cfg = load_config(make_config(tmp_path, prepared_dir))  # no cache built at cache_path
    with pytest.raises(LaunchError, match="exited with code 2") as info:
        start_retrieval_server(cfg)
    log = tmp_path / "logs" / next(p.name for p in (tmp_path / "logs").glob("*.log"))
    assert str(log.with_suffix(".out")) in str(info.value)
    assert "embedding cache not found" in log.read_text()
    assert stop_retrieval_server(cfg) is False


def test_the_start_wait_is_the_configs(tmp_path, prepared_dir, make_config, config, cache):
    """No wait of its own: `retrieval.start_timeout_s` (the model alone loads for seconds)."""
    cfg = load_config(make_config(tmp_path, prepared_dir, start_timeout_s=0.5,
                                  cache_path=config.retrieval.cache_path))
    with pytest.raises(LaunchError, match="not healthy after 0 s"):
        start_retrieval_server(cfg)
    assert stop_retrieval_server(cfg) is False  # the failed start stopped its process


def test_a_stopped_server_ends_without_the_interpreters_teardown(tmp_path, prepared_dir,
                                                                 make_config, config, cache):
    """After its stop the server ends at once: the interpreter's teardown of torch and
    transformers (1.5 s idle, 4.7-10 s under load, while the launcher's stop waited and then
    SIGKILLed it) never runs, shown by an exit hook that never fires (issue 60, item 8)."""
    cfg = load_config(make_config(tmp_path, prepared_dir, cache_path=config.retrieval.cache_path))
    marker, log = tmp_path / "torn_down", tmp_path / "server.out"
    code = (f"import atexit, pathlib, runpy; atexit.register(pathlib.Path({str(marker)!r}).touch)"
            "; runpy.run_module('env.retrieval', run_name='__main__')")
    url = f"http://{cfg.retrieval.host}:{cfg.retrieval.port}"
    proc = start_server([sys.executable, "-c", code, *config_arguments(cfg)], f"{url}/health",
                        log, cfg.retrieval.start_timeout_s)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert f"retrieval server on port {cfg.retrieval.port} stopped" in log.read_text()
    assert not marker.exists()
