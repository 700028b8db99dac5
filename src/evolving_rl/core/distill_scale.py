"""How large the teacher switch's distillation term is next to the GRPO advantages, and the β
that makes them comparable (`loss.distill_calibration_steps`, docs/design.md §4.6).

Owns `measure_scale` → `DistillScale`: over one step's trained samples, the mean |A| of the
solver samples with a non-zero advantage (the term is added to solver tokens' advantages), the
mean |teacher_t − old_t| over the student tokens, and β = target · mean|A| / mean|Δ|, at which
the term β·Δ is on average as large as an advantage; and `calibrated_beta`, the median of the
measured values. A step without a non-zero solver advantage, or whose student tokens all have a
zero log-ratio, has no β (`beta` is None): it says nothing about the ratio.

The step's signed log-ratios are also summarised as a distribution (`LOG_RATIO_QUANTILES` and the
share of tokens where the teacher and the student differ by more than `DIFFERS_NATS`): a mean
near 0 can be many tokens that agree or a few that disagree strongly, and only the second is
something to teach.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample

#: The quantiles of the step's signed log-ratios (teacher - sampled, per student token) logged.
LOG_RATIO_QUANTILES: Final = (0.01, 0.1, 0.5, 0.9, 0.99)
#: |teacher - sampled| above this many nats a token: the teacher differs from the student there.
DIFFERS_NATS: Final = 0.1


@dataclass(frozen=True)
class DistillScale:
    """One step's sizes (0.0 where nothing was measured) and the β they give (None: no evidence)."""

    mean_abs_advantage: float
    advantage_samples: int
    mean_abs_log_ratio: float
    student_tokens: int
    beta: float | None
    # LOG_RATIO_QUANTILES of the signed log-ratios (empty without student tokens)
    log_ratio_quantiles: tuple[float, ...] = field(default=())
    share_differs: float = 0.0  # of student tokens, |log-ratio| > DIFFERS_NATS


def _log_ratios(sample: TrainSample) -> list[float]:
    """teacher - sampled log-prob of each trained token of a student sample."""
    teacher = sample.teacher_log_probs or []
    return [t - o for t, o, m in zip(teacher, sample.log_probs, sample.loss_mask, strict=True)
            if m]


def quantiles(values: Sequence[float], qs: Sequence[float]) -> tuple[float, ...]:
    """Nearest-rank quantiles of `values` (non-empty) at each q of `qs` in [0, 1]."""
    ordered = sorted(values)
    last = len(ordered) - 1
    return tuple(ordered[min(last, max(0, math.ceil(q * len(ordered)) - 1))] for q in qs)


def measure_scale(samples: Sequence[TrainSample], target: float = 1.0) -> DistillScale:
    """The step's sizes over `samples` (the ones that train) and β = target · |A| / |Δ|."""
    if not target > 0:
        raise ValueError(f"target must be > 0, got {target}")
    advantages = [abs(s.advantage) for s in samples
                  if s.role == Role.SOLVER and s.advantage != 0.0]
    ratios = [r for s in samples if s.teacher_log_probs is not None for r in _log_ratios(s)]
    mean_a = math.fsum(advantages) / len(advantages) if advantages else 0.0
    mean_d = math.fsum(abs(r) for r in ratios) / len(ratios) if ratios else 0.0
    beta = target * mean_a / mean_d if mean_a > 0 and mean_d > 0 else None
    if not ratios:
        return DistillScale(mean_a, len(advantages), mean_d, 0, beta)
    differs = sum(abs(r) > DIFFERS_NATS for r in ratios) / len(ratios)
    return DistillScale(mean_a, len(advantages), mean_d, len(ratios), beta,
                        quantiles(ratios, LOG_RATIO_QUANTILES), differs)


def calibrated_beta(measured: Sequence[float]) -> float:
    """The β kept after calibration: the median of the steps' measured values (at least one)."""
    if not measured:
        raise ValueError("no measured β to calibrate from")
    return float(statistics.median(measured))
