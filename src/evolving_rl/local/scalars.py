"""Scalar mirrors of the local run's metrics log: TensorBoard event files and, when set up, W&B.

Owns `ScalarSink` (what `local.metrics.MetricsLog` forwards each record to), `scalar_values`
(the numbers of a record, as `<kind>/<metric>` tags; a metric already named `<kind>/...`, like the
trainer's `train/kl`, keeps its name) and `open_sinks`: a TensorBoard writer on
`<run>/tensorboard/` when `run.tensorboard` is set (one warning and none when the `tensorboard`
package is missing), and a W&B run when the `wandb` package is importable and `WANDB_PROJECT` is
set in the environment (wandb is never a dependency: its own environment variables configure it).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"


class ScalarSink(Protocol):
    def add(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def scalar_values(kind: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a record (not booleans) as `<kind>/<metric>`, a metric already under
    `<kind>/` as it is (`train/kl`, not `train/train/kl`)."""
    return {name if name.startswith(f"{kind}/") else f"{kind}/{name}": float(value)
            for name, value in metrics.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value)}


class TensorBoardSink:
    """One `SummaryWriter` scalar per tag and step."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def add(self, step: int, values: Mapping[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """One `wandb.log` call per record, at its step."""

    def __init__(self, wandb: Any, run_dir: Path) -> None:
        self.run = wandb.init(project=os.environ["WANDB_PROJECT"], name=run_dir.name,
                              dir=str(run_dir))

    def add(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()


def _wandb() -> Any | None:
    if not os.environ.get("WANDB_PROJECT"):
        return None
    try:
        return importlib.import_module("wandb")
    except ImportError:
        return None


def open_sinks(run_dir: str | Path, tensorboard: bool) -> list[ScalarSink]:
    """The mirrors this run writes to (rules in the module docstring)."""
    run_dir = Path(run_dir)
    sinks: list[ScalarSink] = []
    if tensorboard:
        try:
            sinks.append(TensorBoardSink(run_dir / TENSORBOARD_DIR))
        except ImportError as error:
            logger.warning("run.tensorboard is set but TensorBoard is unavailable (%s; pip "
                           "install tensorboard): no event files are written", error)
    wandb = _wandb()
    if wandb is not None:
        sinks.append(WandbSink(wandb, run_dir))
    return sinks
