"""Run-wide fixtures: made once per test run, however many pytest-xdist workers the run has.

A session fixture runs once per worker (scripts/test.sh starts a worker a core and one more), so
an artefact that takes many seconds to make goes through `once`: the first worker that asks makes
it, under a file lock, in the folder every worker of the run shares (the parent of each worker's
base temporary folder: new for every run, so nothing of an earlier run is read), and stores its
JSON value there; the others wait for the lock and read that value. Each caller decodes its own
copy, so no test sees what another changed in it. What `make` writes stays in its folder for the
run: a value may name files there, which its tests only read.
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
    read back by every caller. A `make` that raised left no value: the next caller tries again
    in a fresh folder."""
    shared = shared_folder(factory)
    folder, stored = shared / name, shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stored.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            value = json.dumps(make(folder))
            stored.write_text(value, encoding="utf-8")
    return json.loads(stored.read_text(encoding="utf-8"))
