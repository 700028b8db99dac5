"""A worker's game engine: translated-game cache, translator process, and the one engine lock.

Owns loading games in the real TextWorld/ALFWorld engine for a worker process:

- `compile_game` (grammar parse + PDDL→SAS, most of a cold load) runs in a separate
  translator process, outside the engine lock and outside this process's GIL, so a cold reset
  never stalls the steps of other episodes; concurrent resets of one game share one translation;
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
        self._pending: dict[str, Future[CompiledGame]] = {}
        self._table_lock = threading.Lock()
        self._pool = self._new_pool()
        self.translations = 0

    @staticmethod
    def _new_pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=watch_parent, initargs=(os.getpid(),))

    def translator_pids(self) -> list[int]:
        return [p.pid for p in getattr(self._pool, "_processes", {}).values() if p.pid]

    def _translation(self, game: GameRef) -> tuple[Future[CompiledGame], bool]:
        """The (shared) translation future of `game`; True when this call started it."""
        with self._table_lock:
            future = self._pending.get(game.key)
            if future is not None:
                return future, False
            try:
                future = self._pool.submit(compile_game, str(game.path), game.key, game.task_type)
            except BrokenProcessPool:
                logger.warning("translator process died; starting a new one")
                self._pool = self._new_pool()
                future = self._pool.submit(compile_game, str(game.path), game.key, game.task_type)
            self._pending[game.key] = future
            return future, True

    def _compiled(self, game: GameRef, timeout_s: float) -> CompiledGame:
        future, owner = self._translation(game)
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError:
            raise WireError(408, "reset_abandoned", "the game was not ready within the reset's "
                            "deadline; no episode was kept (retrying soon will be fast)",
                            "timeout_s") from None
        except BrokenProcessPool:
            raise WireError(503, "translator_restarting", "the translator process died; retry",
                            retry_after_s=1) from None
        # The translator runs the game file's content through third-party parsers: any failure
        # there is the file's fault, reported as such (process boundary, documented above).
        except Exception as err:  # noqa: BLE001
            logger.warning("game %s failed to translate: %r", game.key, err)
            raise WireError(422, "bad_game", f"game {game.key!r} could not be loaded",
                            "game") from None
        finally:
            if owner:
                with self._table_lock:
                    self._pending.pop(game.key, None)

    def _runtime(self, game: GameRef, timeout_s: float) -> GameRuntime:
        """Cached runtime of `game`, translating it if needed; call WITHOUT the lock held."""
        with self._table_lock:
            runtime = self._runtimes.get(game.key)
            if runtime is not None:
                self._runtimes.move_to_end(game.key)
                return runtime
        compiled = self._compiled(game, timeout_s)
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

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
