"""The metrics log of a local run: one JSON object per line, appended as the run goes.

Owns `MetricsLog` (append records of a kind — "eval", "train" — with a step number and a wall
time stamp, mirrored to TensorBoard / W&B by `local.scalars`; read them back) and the few
derived numbers the summary and the plot use (`group_variance`: did rewards vary inside the GRPO
groups of a step).

A write that fails (a full disk, a file-size limit) raises `RunWriteError` naming the file, which
the job's command line turns into one line and exit 1. Every reader of the log (`read_records`:
the plot, `evaluate.learning_report`, the comparison's report) drops a torn line (a run killed or
stopped by a full disk mid-write) with a warning, as `pipeline.eval_records.CaseStore` does; a
record appended after one starts on a line of its own.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evolving_rl.local.scalars import ScalarSink, scalar_values

logger = logging.getLogger(__name__)

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


class RunWriteError(OSError):
    """A file of the run could not be written (`path`, and the system's reason)."""

    def __init__(self, path: Path, error: BaseException) -> None:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        super().__init__(f"could not write {path}: {reason}; the run stops here (free space or "
                         "raise the file-size limit, then resume from the last checkpoint)")
        self.path = path


def _torn(path: Path) -> bool:
    """Whether `path` ends inside a line (its last byte only is read)."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) != b"\n"


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
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(("\n" if _torn(self.path) else "")
                             + json.dumps(record, sort_keys=True) + "\n")
        except OSError as error:
            raise RunWriteError(self.path, error) from error
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
    """The records of a metrics log (of one `kind`, or all); [] when there is none yet. A line
    that is no JSON record (a torn last line, or one a later record was appended after) is
    dropped with a warning naming the file and line, as `CaseStore.load` does."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or "kind" not in record:
                    raise ValueError("not a record of the log")
            except ValueError as error:  # json.JSONDecodeError is a ValueError
                logger.warning("%s:%d: unreadable line dropped (%s)", path, number, error)
                continue
            records.append(record)
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
