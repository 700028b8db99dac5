"""Mind2Web's standard metrics (MindAct) and the reference's first-error action accuracy.

Owns `op_f1` (token-level F1 of "OP value" against the gold: whitespace tokens as sets, tokens
that are a substring of `string.punctuation` dropped, as the official metric code does), the
per-step record `StepOutcome`, `task_metrics` (one task's means) and `split_metrics` (the
macro-average over the tasks of a split):

  element accuracy   the step picked the gold element
  operation F1       `op_f1` of the predicted "OP value" against the gold one
  step success rate  element correct and operation F1 == 1
  task success rate  every step of the task successful

Each is averaged over a task's steps, then over tasks (macro). These need teacher-forced
episodes (every step of a task played along the gold path). The reference instead reported the
fraction of correct actions of episodes that stop at the first wrong step:
`first_error_action_accuracy`, named apart so that the two are never confused.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass


def op_f1(predicted: str, gold: str) -> float:
    """Token-level F1 of two "OP value" strings (rule in the module docstring)."""
    pred = {t for t in predicted.split() if t not in string.punctuation}
    label = {t for t in gold.split() if t not in string.punctuation}
    if not pred and not label:
        return 1.0
    common = len(pred & label)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(label)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class StepOutcome:
    """One scored step: whether the element was the gold one, and the operation F1."""

    element_correct: bool
    op_f1: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.op_f1 <= 1.0:
            raise ValueError(f"op_f1 must be in [0, 1], got {self.op_f1!r}")

    @property
    def success(self) -> bool:
        return self.element_correct and self.op_f1 == 1.0


@dataclass(frozen=True)
class WebMetrics:
    """Means of the standard metrics (over one task's steps, or macro over tasks)."""

    element_accuracy: float
    op_f1: float
    step_success_rate: float
    task_success_rate: float
    n_tasks: int

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}element_accuracy": self.element_accuracy, f"{prefix}op_f1": self.op_f1,
                f"{prefix}step_success_rate": self.step_success_rate,
                f"{prefix}task_success_rate": self.task_success_rate,
                f"{prefix}n_tasks": float(self.n_tasks)}


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def task_metrics(steps: Sequence[StepOutcome]) -> WebMetrics:
    """One task's metrics; a task without scored steps counts as failed (all zeros)."""
    if not steps:
        return WebMetrics(0.0, 0.0, 0.0, 0.0, 1)
    successes = [s.success for s in steps]
    return WebMetrics(_mean([float(s.element_correct) for s in steps]),
                      _mean([s.op_f1 for s in steps]), _mean([float(x) for x in successes]),
                      float(all(successes)), 1)


def split_metrics(tasks: Sequence[Sequence[StepOutcome]]) -> WebMetrics:
    """Macro-average over the tasks of a split (each task weighs the same)."""
    per_task = [task_metrics(steps) for steps in tasks]
    return WebMetrics(_mean([t.element_accuracy for t in per_task]),
                      _mean([t.op_f1 for t in per_task]),
                      _mean([t.step_success_rate for t in per_task]),
                      _mean([t.task_success_rate for t in per_task]), len(per_task))


def first_error_action_accuracy(episodes: Sequence[tuple[int, int]]) -> float:
    """The reference's action accuracy: mean over episodes of correct / attempted steps, for
    episodes that end at the first wrong step; each item is (steps correct, steps attempted)."""
    ratios = []
    for correct, attempted in episodes:
        if not 0 <= correct <= attempted:
            raise ValueError(f"need 0 <= correct <= attempted, got {correct}, {attempted}")
        ratios.append(correct / attempted if attempted else 0.0)
    return _mean(ratios)
