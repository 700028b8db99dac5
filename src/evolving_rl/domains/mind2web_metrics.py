"""Mind2Web's standard metrics (MindAct) and the reference's first-error action accuracy.

Owns the one definition of each per-step measure, used alike by the env server
(`env.mind2web.validate`) and by the metrics here (docs/fidelity.md, "Mind2Web scoring"), after
MindAct's evaluation code (OSU-NLP-Group/Mind2Web, `src/action_prediction/metric.py`):

  action strings     `predicted_action_text`: "OP value" of the predicted op and value, whatever
                     the op (a CLICK sent with a value keeps it); `gold_action_text`: the gold
                     op alone for a click, else "OP value". HOVER and ENTER are clicks.
  operation F1       `op_f1`: F1 of the two strings' whitespace-token sets, case-sensitive, tokens
                     that are a substring of `string.punctuation` dropped
  step success       `step_success`: element correct and operation F1 == 1
  element correct    `element_correct`: the chosen element is a positive candidate; on a step
                     with none, never under the "standard" rule (MindAct), and when the
                     action repr matches (the server's "fuzzy" match) under "reference_fallback"

and the per-step record `StepOutcome`, `task_metrics` (one task's means) and `split_metrics` (the
macro-average over the tasks of a split):

  element accuracy   the step picked the gold element
  operation F1       as above
  step success rate  as above
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

CLICK_OPS = frozenset({"CLICK", "HOVER", "ENTER"})
STANDARD, REFERENCE_FALLBACK = "standard", "reference_fallback"
EMPTY_POSITIVE_RULES = (STANDARD, REFERENCE_FALLBACK)


def normalise_op(op: str) -> str:
    """The op upper-cased, HOVER and ENTER as CLICK (MindAct's `op` field does the same)."""
    op = op.strip().upper()
    return "CLICK" if op in CLICK_OPS else op


def predicted_action_text(op: str, value: str) -> str:
    """A prediction's "OP value" string (a click's value is kept, as MindAct parses it)."""
    return f"{normalise_op(op)} {value.strip()}".strip()


def gold_action_text(op: str, value: str) -> str:
    """The gold "OP value" string: a click is its op alone."""
    op = normalise_op(op)
    return op if op == "CLICK" else f"{op} {value.strip()}".strip()


def _tokens(text: str) -> set[str]:
    return {t for t in text.split() if t not in string.punctuation}


def op_f1(predicted: str, gold: str) -> float:
    """Token-level F1 of two "OP value" strings (rule in the module docstring)."""
    pred, label = _tokens(predicted), _tokens(gold)
    if not pred and not label:
        return 1.0
    common = len(pred & label)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(label)
    return 2 * precision * recall / (precision + recall)


def element_correct(match: str, rule: str) -> bool:
    """Whether an element match ("positive" | "fuzzy" | "none") is right under `rule`."""
    if rule not in EMPTY_POSITIVE_RULES:
        raise ValueError(f"unknown empty-positive rule {rule!r}")
    return match == "positive" or match == "fuzzy" and rule == REFERENCE_FALLBACK


def step_success(element_correct: bool, f1: float) -> bool:
    """MindAct's step success: the gold element and an exact operation (F1 == 1)."""
    return element_correct and f1 == 1.0


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
        return step_success(self.element_correct, self.op_f1)


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
