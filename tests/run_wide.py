"""Run-wide fixtures: made once per test run, however many pytest-xdist workers the run has.

A session fixture runs once per worker (scripts/test.sh starts a worker a core and one more), so
an artefact that takes many seconds to make goes through `once`: the first worker that asks makes
it, under a file lock, in the folder every worker of the run shares (the parent of each worker's
base temporary folder: new for every run, so nothing of an earlier run is read), and stores its
JSON value there; the others wait for the lock and read that value. Each caller decodes its own
copy, so no test sees what another changed in it. What `make` writes stays in its folder for the
run: a value may name files there, which its tests only read.

A failed `make` (an error, or the test's timeout under pytest-timeout) is reported once: its
caller fails with it, and every later caller of the run, in every worker, is skipped with its
cause instead of making it again (under load, each of 50 tests timed out on the same fixture).
A caller whose timeout comes while another worker is making the value is skipped too, saying so.
Call `once` from a function-scoped fixture: pytest re-raises a session fixture's error in every
test that uses it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def shared_folder(factory: pytest.TempPathFactory) -> Path:
    """The folder all workers of this run share (without xdist, the run's base temp folder)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]) -> Any:
    """`make(folder)`'s value (JSON-able), made once in this run under `<shared>/<name>/` and
    read back by every caller; a failure as the module docstring says."""
    shared = shared_folder(factory)
    stored, failed = shared / f"{name}.json", shared / f"{name}.failed"
    with open(shared / f"{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except pytest.fail.Exception as timeout:
            pytest.skip(f"run-wide {name}: {timeout} while another worker was making it")
        if failed.is_file():
            pytest.skip(f"run-wide {name} failed earlier in this run (reported by the test "
                        f"that made it): {failed.read_text(encoding='utf-8')}")
        if not stored.is_file():
            _make(shared / name, stored, failed, make)
    return json.loads(stored.read_text(encoding="utf-8"))


def _make(folder: Path, stored: Path, failed: Path, make: Callable[[Path], Any]) -> None:
    """Store `make`'s value in `stored`, or its cause in `failed` (then raise it again)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        value = json.dumps(make(folder))
    except (Exception, pytest.fail.Exception) as error:
        failed.write_text(f"{type(error).__name__}: {error}", encoding="utf-8")
        raise
    stored.write_text(value, encoding="utf-8")
