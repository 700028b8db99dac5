"""Cold page snapshots built on every core: `build_snapshot` in a pool of processes.

Owns `SnapshotBuilder`. `build_snapshot` is pure Python, so in the server process the GIL queues
every client's cold page behind one core. With `processes` > 0 the pages are built in that many
spawned child processes (spawned, not forked: the server has threads) while the request thread
waits without holding the GIL. A child sends its snapshot back marshalled (a snapshot is strings
and tuples of strings, which `marshal` writes and reads faster than pickle), and the server only
reads it. The processes are started with the builder, before the
server listens, and die with the process that started them (a killed server leaves none behind:
Linux's parent-death signal, `env.launch.dies_with_parent`). `processes` 0 builds in the calling
thread. A pool broken by a dead child is replaced, and that page built in the calling thread.
"""

from __future__ import annotations

import gc
import logging
import marshal
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from env.launch import dies_with_parent
from env.mind2web.snapshot import Snapshot, build_snapshot

logger = logging.getLogger(__name__)


def pool_size(setting: int) -> int:
    """`mind2web.snapshot_processes`: -1 is one process per CPU core this process may use."""
    return len(os.sched_getaffinity(0)) if setting < 0 else setting


def _die_with(parent: int) -> None:
    """Pool initializer: be signalled when the server dies, and exit now if it already has (it
    may die between starting this process and this call)."""
    arm = dies_with_parent()
    if arm is not None:
        arm()
    if os.getppid() != parent:
        os._exit(1)


def _build_marshalled(page: str) -> bytes:
    """In a pool process: the snapshot of `page` as marshalled (text, entries). The cyclic
    garbage collector is off meanwhile: a build makes thousands of objects and no cycles, so
    the collections they would trigger would only walk its live tree."""
    gc.disable()
    try:
        snapshot = build_snapshot(page)
        return marshal.dumps((snapshot.text, snapshot.entries))
    finally:
        gc.enable()


class SnapshotBuilder:
    """`build(page)`: the snapshot of a cleaned_html page, in the pool when there is one."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor | None:
        """A pool whose processes are all started (so that no request waits on a spawn)."""
        if not self.processes:
            return None
        pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_die_with, initargs=(os.getpid(),))
        for future in [pool.submit(_build_marshalled, "") for _ in range(self.processes)]:
            future.result()
        return pool

    def build(self, page: str) -> Snapshot:
        pool = self._pool
        if pool is None:
            return build_snapshot(page)
        try:
            return Snapshot(*marshal.loads(pool.submit(_build_marshalled, page).result()))
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    logger.warning("a snapshot process died; starting a new pool")
                    self._pool = self._new_pool()
            return build_snapshot(page)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
