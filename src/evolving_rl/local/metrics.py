"""The metrics log of a local run: one JSON object per line, appended as the run goes.

Owns `MetricsLog` (append records of a kind — "eval", "train" — with a step number and a wall
time stamp, mirrored to TensorBoard / W&B by `local.scalars`; read them back) and the few
derived numbers the summary and the plot use (`group_variance`: did rewards vary inside the GRPO
groups of a step).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evolving_rl.local.scalars import ScalarSink, scalar_values

FILE_NAME = "metrics.jsonl"


def _plain(value: Any) -> Any:
    """JSON-safe scalars: non-finite floats become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class MetricsLog:
    """Append-only JSONL of run records: {"kind", "step", "time_s", **metrics}; each record's
    numbers also go to the scalar `sinks` (`local.scalars`) as `<kind>/<metric>` at its step."""

    def __init__(self, path: str | Path, sinks: Sequence[ScalarSink] = ()) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.sinks = list(sinks)
        self._started = time.perf_counter()

    @classmethod
    def in_run_dir(cls, run_dir: str | Path, sinks: Sequence[ScalarSink] = ()) -> MetricsLog:
        return cls(Path(run_dir) / FILE_NAME, sinks)

    def write(self, kind: str, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        record = {"kind": kind, "step": step,
                  "time_s": round(time.perf_counter() - self._started, 3), **_plain(metrics)}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
        values = scalar_values(kind, _plain(metrics))
        for sink in self.sinks:
            sink.add(step, values)
        return record

    def close(self) -> None:
        """Close the scalar sinks (the JSONL is closed after every write)."""
        for sink in self.sinks:
            sink.close()
        self.sinks = []

    def read(self, kind: str | None = None) -> list[dict[str, Any]]:
        return read_records(self.path, kind)


def read_records(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The records of a metrics log (of one `kind`, or all); [] when there is none yet."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return [r for r in records if kind is None or r["kind"] == kind]


def group_variance(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Groups of a rollout and how many had rewards that varied (non-zero variance)."""
    groups = float(metrics.get("groups/count", 0.0))
    zero = float(metrics.get("groups/zero_variance", 0.0))
    out = {"groups": groups, "varied_groups": groups - zero,
           "varied_fraction": (groups - zero) / groups if groups else 0.0}
    for role in ("extractor", "solver"):
        count = float(metrics.get(f"groups/{role}/count", 0.0))
        out[f"{role}_groups"] = count
        out[f"{role}_varied_groups"] = count - float(metrics.get(f"groups/{role}/zero_variance", 0))
    return out
