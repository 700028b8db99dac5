"""The local backend's β of the teacher switch, step by step (`loss.distill_coef` and
`loss.distill_calibration_steps`, docs/design.md §4.6).

Owns `DistillCalibration`: before each trainer step, `measure` reads the step's samples
(`core.distill_scale`) and returns the β that step trains with and the metrics that say why.
With `distill_calibration_steps: 0` β is `distill_coef` on every step (the sizes are still
logged). With k > 0, each step up to and including the k-th one that has evidence trains with
the median of the β measured so far (`distill_coef` until the first evidence), and every later
step with the median of those k: a step without a non-zero solver advantage or a student
log-ratio measures nothing and does not count. The state lives in the job's process: a run
resumed from a checkpoint measures again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from evolving_rl.config.schema import LossConfig
from evolving_rl.core.distill_scale import LOG_RATIO_QUANTILES, calibrated_beta, measure_scale
from evolving_rl.core.samples import TrainSample

logger = logging.getLogger(__name__)


class DistillCalibration:
    """β per step from `loss` (rules in the module docstring)."""

    def __init__(self, loss: LossConfig) -> None:
        self.fixed = loss.distill_coef
        self.steps = loss.distill_calibration_steps
        self.target = loss.distill_calibration_target
        self.measured: list[float] = []

    @property
    def frozen(self) -> bool:
        return len(self.measured) >= self.steps

    def beta(self) -> float:
        """The β the next step trains with, before its own measurement."""
        return calibrated_beta(self.measured) if self.steps and self.measured else self.fixed

    def measure(self, samples: Sequence[TrainSample]) -> tuple[float, dict[str, float]]:
        """This step's β and the metrics of its measurement (`teacher/...`)."""
        scale = measure_scale(samples, self.target)
        if self.steps and not self.frozen and scale.beta is not None:
            self.measured.append(scale.beta)
            if self.frozen:
                logger.info("distillation β calibrated to %.4g (median of %s)", self.beta(),
                            [round(b, 4) for b in self.measured])
        metrics = {"teacher/beta": self.beta(),
                   "teacher/mean_abs_advantage": scale.mean_abs_advantage,
                   "teacher/mean_abs_log_ratio": scale.mean_abs_log_ratio,
                   "teacher/scale_tokens": float(scale.student_tokens),
                   "teacher/share_differs": scale.share_differs}
        metrics.update({f"teacher/log_ratio_p{round(q * 100):02d}": value for q, value in zip(
            LOG_RATIO_QUANTILES, scale.log_ratio_quantiles, strict=False)})
        if scale.beta is not None:
            metrics["teacher/measured_beta"] = scale.beta
        return self.beta(), metrics
