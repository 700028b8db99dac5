"""Plumbing shared by the benchmarks (not a benchmark itself).

Owns `run_clients` (closed-loop clients on threads, for the server benchmarks) and
`parse_with_tiny`: every benchmark takes `--tiny`, the test suite's smoke run
(tests/test_benchmarks.py) — the same code path at the sizes of the benchmark's `TINY` defaults;
flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def parse_with_tiny(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                    tiny: Mapping[str, Any]) -> argparse.Namespace:
    """Parse `argv`; with `--tiny`, the defaults become `tiny` before the flags are read."""
    parser.add_argument("--tiny", action="store_true", help="smoke sizes (see above)")
    args = parser.parse_args(argv)
    if args.tiny:
        parser.set_defaults(**tiny)
        args = parser.parse_args(argv)
    return args


def run_clients(n_clients: int, n_episodes: int, play: Callable[[int], None]) -> float:
    """Run `play(i)` for i < n_episodes on n_clients threads; wall seconds."""
    counter = itertools.count()

    def client() -> None:
        while (i := next(counter)) < n_episodes:
            play(i)

    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start
