"""One job per output folder: an exclusive lock on `<run.output_dir>/.job.lock`.

The main job takes the lock (`hold`) after its preflight and before anything in the folder is
moved or written, and keeps it until its summary is written; a second job on the same folder
(whatever its ports) exits 2 naming the one that runs (`holder`, also asked by the preflight so
that the comparison launcher refuses before it archives anything). The lock is a `flock` on the
open file: the kernel drops it when the holding process ends, however it ends (kill -9
included), so a crashed run never leaves a stale lock behind. The file itself stays in the folder
(never archived); it names the last holder: process id, host, start time and command.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from evolving_rl.config import ConfigError

LOCK_FILE = ".job.lock"


def _in_use(run_dir: Path, who: str) -> str:
    return (f"{run_dir} is in use by a running job ({who}); wait for it to end, or --set "
            "run.output_dir=<another folder>")


def _try_lock(handle: object) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[attr-defined]
    except BlockingIOError:
        return False
    return True


def holder(run_dir: Path) -> str | None:
    """Who holds `run_dir`'s lock (the lock file's text), or None when no job does."""
    path = run_dir / LOCK_FILE
    if not path.is_file():
        return None
    with path.open("r", encoding="utf-8") as handle:
        if _try_lock(handle):
            return None  # closing the file releases the lock taken just now
        return handle.read().strip() or "its name not written yet"


@contextlib.contextmanager
def hold(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock for the block (creating the folder); `ConfigError` naming the
    holder when another job has it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / LOCK_FILE).open("a+", encoding="utf-8") as handle:
        if not _try_lock(handle):
            handle.seek(0)
            who = handle.read().strip() or "its name not written yet"
            raise ConfigError("run.output_dir", _in_use(run_dir, who))
        handle.truncate(0)
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: "
                     f"{' '.join(sys.argv)}\n")
        handle.flush()
        yield


def busy_problem(run_dir: Path) -> str | None:
    """The preflight's line when a running job holds `run_dir`, else None."""
    who = holder(run_dir) if run_dir.is_dir() else None
    return None if who is None else f"run.output_dir: {_in_use(run_dir, who)}"
