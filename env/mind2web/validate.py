"""Judging one action against one Mind2Web step: the reference's rules plus MindAct's metrics.

Owns `judge`. The operation must match after normalisation (HOVER and ENTER count as CLICK). The
target must be a positive candidate: the chosen line's chain holds one of the step's positive
backend ids (match "positive"). A step with no positive candidate falls back, as the reference
does, on its action repr (`[role] text -> OP: value`): the chosen element must have an equivalent
role and its text must contain, be contained in, or be similar (ratio >= 0.72) to the gold text
(match "fuzzy"). TYPE / SELECT values match after lower-casing and whitespace collapse; CLICK
takes no value (value_correct None). `op_f1` is MindAct's token-set F1 of "OP value" vs gold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from env.mind2web.snapshot import Element, Snapshot, clean

OPS = frozenset({"CLICK", "TYPE", "SELECT", "HOVER", "ENTER"})
FUZZY_RATIO = 0.72
_REPR = re.compile(r"^\[(?P<role>[^\]]*)\]\s*(?P<target>.*?)\s*->\s*(?P<op>[A-Za-z]+)"
                   r"(?:\s*:\s*(?P<value>.*))?$", re.S)
ROLE_EQUIVALENTS = {"searchbox": {"textbox", "searchbox"}, "textbox": {"textbox", "searchbox"},
                    "combobox": {"combobox", "listbox", "option", "select"},
                    "option": {"option", "combobox"}}


def normalise_op(op: str) -> str:
    op = op.strip().upper()
    return "CLICK" if op in {"HOVER", "ENTER"} else op


def normalise_value(value: str) -> str:
    return clean(value).lower()


@dataclass(frozen=True)
class GoldStep:
    """What one step expects: op, value, positive backend ids and the action repr."""

    op: str
    value: str
    positive_ids: frozenset[str]
    action_repr: str

    @property
    def takes_value(self) -> bool:
        return normalise_op(self.op) in {"TYPE", "SELECT"}


@dataclass(frozen=True)
class Action:
    op: str
    ref: str
    value: str = ""


@dataclass(frozen=True)
class Result:
    correct: bool
    element_correct: bool
    op_correct: bool
    value_correct: bool | None
    op_f1: float
    match: str  # "positive" | "fuzzy" | "none"


def _repr_parts(action_repr: str) -> tuple[str, str, str]:
    """(role, target text, value) of an action repr; ('', whole text, '') when it does not
    parse."""
    found = _REPR.match(clean(action_repr))
    if found is None:
        return "", clean(action_repr), ""
    return (found["role"].strip().lower(), found["target"].strip(" ."),
            clean(found["value"] or ""))


def _role_ok(expected: str, roles: frozenset[str]) -> bool:
    return not expected or bool(roles & ROLE_EQUIVALENTS.get(expected, {expected}))


def _text_ok(expected: str, actual: str) -> bool:
    expected, actual = normalise_value(expected), normalise_value(actual)
    if not expected or expected in actual or actual in expected:
        return True
    return SequenceMatcher(None, expected, actual).ratio() >= FUZZY_RATIO


def element_match(gold: GoldStep, element: Element) -> str:
    """'positive', 'fuzzy' or 'none': whether (and by which rule) `element` is the target."""
    if gold.positive_ids:
        return "positive" if element.backend_ids & gold.positive_ids else "none"
    role, target, _ = _repr_parts(gold.action_repr)
    fuzzy = _role_ok(role, element.roles) and _text_ok(target, element.search_text)
    return "fuzzy" if fuzzy else "none"


def expected_refs(gold: GoldStep, snapshot: Snapshot) -> list[str]:
    """The refs of `snapshot` that `judge` accepts as this step's target."""
    return [e.ref for e in snapshot.elements if element_match(gold, e) != "none"]


def gold_value(gold: GoldStep) -> str:
    return gold.value or _repr_parts(gold.action_repr)[2]


def op_f1(action: Action, gold: GoldStep) -> float:
    """MindAct's operation F1: token sets of "OP value" (value only for TYPE / SELECT)."""
    def tokens(op: str, value: str) -> set[str]:
        op = normalise_op(op)
        return set(f"{op} {value}".split() if op in {"TYPE", "SELECT"} else [op])

    pred, label = tokens(action.op, action.value), tokens(gold.op, gold_value(gold))
    common = len(pred & label)
    if not common:
        return 0.0
    precision, recall = common / len(pred), common / len(label)
    return 2 * precision * recall / (precision + recall)


def judge(gold: GoldStep, snapshot: Snapshot, action: Action) -> Result:
    """The result of `action` (ref in `snapshot`) on the step `gold`."""
    element = snapshot.element(action.ref)
    match = "none" if element is None else element_match(gold, element)
    op_correct = normalise_op(action.op) == normalise_op(gold.op)
    value_correct = (normalise_value(action.value) == normalise_value(gold_value(gold))
                     if gold.takes_value else None)
    element_correct = match != "none"
    correct = element_correct and op_correct and value_correct is not False
    return Result(correct, element_correct, op_correct, value_correct, op_f1(action, gold), match)
