"""A worker's game engine: translated-game cache, translator process, and the one engine lock.

Owns loading games in the real TextWorld/ALFWorld engine for a worker process:

- `compile_game` (grammar parse + PDDL→SAS, most of a cold load) runs in a separate
  translator process, outside the engine lock and outside this process's GIL, so a cold reset
  never stalls the steps of other episodes; every reset of a game shares its one translation
  job, however many ask and however short their deadlines: a reset whose deadline ends first
  leaves the job running (a 408 that a retry soon will find done), and a finished translation
  that no reset has used yet is kept (at least one, up to `translation_cache_games`) for the next
  reset of its game, so a flood of short-deadline resets queues one job per game, not one a try;
  a job that had not started when its last reset gave up is dropped instead (a 408 saying so: a
  retry needs a longer deadline), so a flood of short-deadline resets of many cold games leaves
  no backlog in front of the next reset (at most the executor's two queued calls);
- translated games are kept in an LRU of `translation_cache_games` entries (0: none kept), so a
  repeat reset skips the translation;
- everything that touches the engine (the Fast Downward lib, the grammar) runs under one lock
  per process: the engine is not thread-safe; parallelism comes from running more workers.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial

from env.alfworld.games import GameRef
from env.alfworld.runtime import DownwardLib, Episode, GameRuntime
from env.alfworld.translation import CompiledGame, compile_game, watch_parent
from env.wire import WireError

logger = logging.getLogger(__name__)


class Engine:
    """Games and episodes of one worker process (see module docstring)."""

    def __init__(self, cache_games: int) -> None:
        self.lock = threading.Lock()
        self._cache_games = cache_games
        self._lib = DownwardLib()
        self._runtimes: OrderedDict[str, GameRuntime] = OrderedDict()
        # A game's translation job, from its submission until a reset has used its result.
        self._pending: dict[str, Future[CompiledGame]] = {}
        self._unclaimed: OrderedDict[str, None] = OrderedDict()  # done, not used yet, oldest first
        self._keep_unclaimed = max(1, cache_games)
        self._waiters: dict[str, int] = {}  # resets waiting for each game's job now
        # Reentrant: cancelling a job runs its done callback (`_finished`) in the cancelling thread.
        self._table_lock = threading.RLock()
        self._pool = self._new_pool()
        self.translations = 0
        self.translator_jobs = 0
        self.translations_dropped = 0

    @staticmethod
    def _new_pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=watch_parent, initargs=(os.getpid(),))

    def translator_pids(self) -> list[int]:
        return [p.pid for p in getattr(self._pool, "_processes", {}).values() if p.pid]

    def _translation(self, game: GameRef) -> Future[CompiledGame]:
        """The one translation job of `game` (the pending one, else a new one), counted as
        waited for until `_stop_waiting`."""
        with self._table_lock:
            self._waiters[game.key] = self._waiters.get(game.key, 0) + 1
            future = self._pending.get(game.key)
            if future is not None:
                return future
            try:
                future = self._pool.submit(compile_game, str(game.path), game.key, game.task_type)
            except BrokenProcessPool:
                logger.warning("translator process died; starting a new one")
                self._pool = self._new_pool()
                future = self._pool.submit(compile_game, str(game.path), game.key, game.task_type)
            self._pending[game.key] = future
            self.translator_jobs += 1
        # Outside the lock: a job already done runs its callback here, at once.
        future.add_done_callback(partial(self._finished, game.key))
        return future

    def _finished(self, key: str, future: Future[CompiledGame]) -> None:
        """A job ended: a failed one is forgotten (the next reset tries again); a result is kept
        until a reset uses it, the oldest unused ones dropped past `_keep_unclaimed`."""
        with self._table_lock:
            if self._pending.get(key) is not future:
                return
            if future.cancelled() or future.exception() is not None:
                del self._pending[key]
                return
            self._unclaimed[key] = None
            while len(self._unclaimed) > self._keep_unclaimed:
                dropped, _ = self._unclaimed.popitem(last=False)
                del self._pending[dropped]

    def _claimed(self, key: str, future: Future[CompiledGame]) -> None:
        """A reset used the result of `future` (now in the runtime cache, if any)."""
        with self._table_lock:
            if self._pending.get(key) is future:
                del self._pending[key]
                self._unclaimed.pop(key, None)

    def _stop_waiting(self, key: str, future: Future[CompiledGame], drop: bool = False) -> bool:
        """A reset stops waiting for `future`. With `drop` (its deadline ended), True when it was
        the last one waiting and the job, not started yet, is dropped."""
        with self._table_lock:
            self._waiters[key] -= 1
            if self._waiters[key] > 0:
                return False
            del self._waiters[key]
            dropped = drop and future.cancel()  # runs `_finished`, which forgets the job
            self.translations_dropped += dropped
            return dropped

    def _compiled(self, game: GameRef, timeout_s: float) -> tuple[CompiledGame, Future]:
        future = self._translation(game)
        try:
            compiled = future.result(timeout=timeout_s)
        except TimeoutError:
            if self._stop_waiting(game.key, future, drop=True):
                raise WireError(408, "reset_abandoned", "the game's translation had not started "
                                "within the reset's deadline (other games were queued first) and "
                                "was dropped; no episode was kept: retry with a longer timeout_s",
                                "timeout_s") from None
            raise WireError(408, "reset_abandoned", "the game was not ready within the reset's "
                            "deadline; no episode was kept (its translation goes on and is "
                            "kept: retrying soon will be fast)", "timeout_s") from None
        except BrokenProcessPool:
            self._stop_waiting(game.key, future)
            raise WireError(503, "translator_restarting", "the translator process died; retry",
                            retry_after_s=1) from None
        # The translator runs the game file's content through third-party parsers: any failure
        # there is the file's fault, reported as such (process boundary, documented above).
        except Exception as err:  # noqa: BLE001
            self._stop_waiting(game.key, future)
            logger.warning("game %s failed to translate: %r", game.key, err)
            raise WireError(422, "bad_game", f"game {game.key!r} could not be loaded",
                            "game") from None
        self._stop_waiting(game.key, future)
        return compiled, future

    def _runtime(self, game: GameRef, timeout_s: float) -> GameRuntime:
        """Cached runtime of `game`, translating it if needed; call WITHOUT the lock held."""
        with self._table_lock:
            runtime = self._runtimes.get(game.key)
            if runtime is not None:
                self._runtimes.move_to_end(game.key)
                return runtime
        compiled, future = self._compiled(game, timeout_s)
        self.translations += 1
        with self.lock:
            runtime = compiled.runtime(self._lib)
        if self._cache_games > 0:
            with self._table_lock:
                runtime = self._runtimes.setdefault(game.key, runtime)
                self._runtimes.move_to_end(game.key)
                while len(self._runtimes) > self._cache_games:
                    _, dropped = self._runtimes.popitem(last=False)
                    self._lib_release(dropped)
        self._claimed(game.key, future)
        return runtime

    def _lib_release(self, runtime: GameRuntime) -> None:
        with self.lock:
            self._lib.release(runtime)

    def new_episode(self, game: GameRef, timeout_s: float) -> Episode:
        """Reset: a fresh episode of `game` (translation happens outside the engine lock)."""
        runtime = self._runtime(game, timeout_s)
        with self.lock:
            return Episode(runtime, self._lib)

    def step(self, episode: Episode, action: str) -> None:
        with self.lock:
            episode.step(action)

    @property
    def cached_games(self) -> int:
        return len(self._runtimes)

    @property
    def translations_ready(self) -> int:
        """Finished translations that no reset has used yet (kept for the next one)."""
        return len(self._unclaimed)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
