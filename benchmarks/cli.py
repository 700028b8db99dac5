"""Command-line plumbing shared by the benchmarks (not a benchmark itself).

Owns `parse_with_tiny`: every benchmark takes `--tiny`, the test suite's smoke run
(tests/test_benchmarks.py) — the same code path at the sizes of the benchmark's `TINY` defaults;
flags given explicitly still win.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
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
