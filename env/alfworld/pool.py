"""The router's worker processes: spawn, health checks, death detection, respawn, placement.

Owns the ALFWorld workers as the router's children. Every `health_interval_s` each worker is checked
(a health answer counts only when it names the PID the router spawned: a worker of another run on
the same port is never adopted): a process that exited, or that failed `unhealthy_after` checks in a
row, is declared dead (killed if still running — only the PID we started), and a replacement is
spawned in the background. A worker's `boot` token changes with every process, so episode ids of a
dead worker answer "episode lost" instead of hanging; every boot a slot has had is kept (`boots`),
so an id naming a boot that never was is unknown, not lost. Placement of a new episode: the healthy
worker with the lowest load (live + resets in flight) relative to its capacity.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import urllib3

from env.alfworld.launch import log_file
from env.launch import LaunchError, spawn_server, stop_process, wait_for_health
from evolving_rl.config.schema import AlfworldConfig

logger = logging.getLogger(__name__)


@dataclass
class WorkerHandle:
    """What the router knows about one worker slot."""

    index: int
    url: str
    capacity: int
    proc: subprocess.Popen | None = None
    boot: str | None = None
    boots: set[str] = field(default_factory=set)
    healthy: bool = False
    live: int = 0
    pending: int = 0
    fails: int = 0
    restarts: int = 0

    def summary(self) -> dict:
        return {"index": self.index, "url": self.url, "pid": self.proc.pid if self.proc else None,
                "boot": self.boot, "healthy": self.healthy, "live_episodes": self.live,
                "pending_resets": self.pending, "restarts": self.restarts}


class WorkerPool:
    """The router's workers (thread-safe)."""

    def __init__(self, cfg: AlfworldConfig, worker_cmd: Callable[[int], list[str]],
                 http: urllib3.PoolManager) -> None:
        self.cfg, self._worker_cmd, self._http = cfg, worker_cmd, http
        self.workers = [WorkerHandle(i, f"http://{cfg.host}:{cfg.worker_base_port + i}",
                                     cfg.capacity) for i in range(cfg.n_workers)]
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def _log_path(self, index: int) -> Path:
        return log_file(self.cfg, "worker", self.cfg.worker_base_port + index)

    def _spawn(self, index: int) -> subprocess.Popen:
        # Fixed hash seed: the engine lists objects in set order; same seed, same text.
        env = dict(os.environ, PYTHONHASHSEED="0")
        return spawn_server(self._worker_cmd(index), self._log_path(index), env)

    def start_all(self) -> None:
        """Spawn every worker, then wait until all answer health (raises `LaunchError`)."""
        for handle in self.workers:
            handle.proc = self._spawn(handle.index)
        for handle in self.workers:
            self._await(handle)

    def _await(self, handle: WorkerHandle) -> None:
        assert handle.proc is not None
        wait_for_health(f"{handle.url}/health", self.cfg.start_timeout_s, handle.proc)
        self._refresh(handle)
        logger.info("worker %d up (pid %d, boot %s)", handle.index, handle.proc.pid, handle.boot)

    def _refresh(self, handle: WorkerHandle) -> bool:
        """One health check; updates boot and load. False when it failed."""
        try:
            resp = self._http.request("GET", f"{handle.url}/health", retries=False,
                                      timeout=urllib3.Timeout(connect=1.0, read=2.0))
            body = json.loads(resp.data) if resp.status == 200 else None
        except (urllib3.exceptions.HTTPError, ValueError):
            body = None
        with self._lock:
            # Another run's worker on this port (ours failed to bind) is no worker of ours.
            if not isinstance(body, dict) or handle.proc is None or \
                    body.get("pid") != handle.proc.pid:
                handle.fails += 1
                return False
            handle.fails, handle.healthy = 0, True
            handle.boot = body.get("boot")
            if isinstance(handle.boot, str):
                handle.boots.add(handle.boot)
            handle.live = int(body.get("live_episodes", 0))
        return True

    def check(self) -> None:
        """Check every worker once; declare dead and respawn those that are."""
        for handle in self.workers:
            if handle.proc is None or not handle.healthy:
                continue  # being (re)spawned
            exited = handle.proc.poll() is not None
            if exited or (not self._refresh(handle) and handle.fails >= self.cfg.unhealthy_after):
                self.declare_dead(handle, "exited" if exited else "failed health checks")

    def declare_dead(self, handle: WorkerHandle, why: str) -> None:
        with self._lock:
            if not handle.healthy or self._stop.is_set():
                return
            handle.healthy, handle.boot, handle.live, handle.fails = False, None, 0, 0
            proc = handle.proc
        logger.warning("worker %d (pid %s) %s; its episodes are lost; respawning", handle.index,
                       proc.pid if proc else None, why)
        threading.Thread(target=self._respawn, args=(handle, proc), daemon=True,
                         name=f"respawn-{handle.index}").start()

    def _respawn(self, handle: WorkerHandle, old: subprocess.Popen | None) -> None:
        if old is not None:
            stop_process(old, self.cfg.stop_timeout_s)
        while not self._stop.is_set():
            handle.proc = self._spawn(handle.index)
            handle.restarts += 1
            try:
                self._await(handle)
                return
            except LaunchError as err:
                logger.error("respawning worker %d failed: %s", handle.index, err)
                stop_process(handle.proc, self.cfg.stop_timeout_s)
                self._stop.wait(self.cfg.health_interval_s)

    def supervise(self) -> None:
        """Health-check loop (run in a thread until `stop_all`)."""
        while not self._stop.wait(self.cfg.health_interval_s):
            self.check()

    def place(self, exclude: set[int], game: str) -> WorkerHandle | None:
        """Reserve a healthy worker with room: the least loaded, except that a game keeps to its
        "home" worker (stable hash) while that one is within `slack` of the least loaded — so
        each game is translated and cached by one worker, not by all of them."""
        with self._lock:
            open_ = [h for h in self.workers if h.healthy and h.index not in exclude
                     and h.live + h.pending < h.capacity]
            if not open_:
                return None
            load = {h.index: (h.live + h.pending) / h.capacity for h in open_}
            best = min(open_, key=lambda h: (load[h.index], h.index))
            home = self.workers[zlib.crc32(game.encode()) % len(self.workers)]
            slack = max(4, best.capacity // 20) / best.capacity
            if home.index in load and load[home.index] <= load[best.index] + slack:
                best = home
            best.pending += 1
            return best

    def placed(self, handle: WorkerHandle, started: bool, full: bool = False) -> None:
        with self._lock:
            handle.pending -= 1
            if started:
                handle.live += 1
            if full:
                handle.live = max(handle.live, handle.capacity)

    def closed(self, handle: WorkerHandle) -> None:
        with self._lock:
            handle.live = max(0, handle.live - 1)

    @staticmethod
    def exited(handle: WorkerHandle, grace_s: float = 1.0) -> bool:
        """Whether the worker process has exited (waiting briefly: a failed request to a worker
        being killed can come back before the kernel reports the exit)."""
        if handle.proc is None:
            return True
        try:
            handle.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def all_healthy(self) -> bool:
        return all(h.healthy for h in self.workers)

    def stop_all(self) -> None:
        self._stop.set()
        for handle in self.workers:
            if handle.proc is not None:
                stop_process(handle.proc, self.cfg.stop_timeout_s)


def worker_command(config_args: list[str], parent_pid: int) -> Callable[[int], list[str]]:
    """The command line of worker `index`; `config_args` hand it the router's config
    (`env.launch.config_arguments`)."""

    def cmd(index: int) -> list[str]:
        return [sys.executable, "-m", "env.alfworld.worker", *config_args,
                "--index", str(index), "--parent-pid", str(parent_pid)]

    return cmd
