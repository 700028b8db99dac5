"""Judging one action against one Mind2Web step: MindAct's scoring plus the empty-positive rule.

Owns `judge`. The element is right when the chosen line's chain holds one of the step's positive
backend ids (match "positive"). Some official steps have no positive candidate: under the
standard rule (`mind2web.empty_positive_rule: standard`, MindAct's evaluation) no element is right
there; under `reference_fallback` (the reference's environment, kept for training) the step's
action repr (`[role] text -> OP: value`) stands in: the chosen element must have an equivalent
role and its text must contain, be contained in, or be similar (ratio >= 0.72) to the gold text.
Either way such a match is reported as "fuzzy", so a client can score both rules. The operation
F1 and the step's correctness are `evolving_rl.domains.mind2web_metrics`'s (`op_f1` of the
predicted and gold action strings, `step_success`): one definition for the server and the
adapter's metrics. HOVER and ENTER count as CLICK (`op_correct`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from env.mind2web.snapshot import Element, Snapshot, clean
from evolving_rl.domains.mind2web_metrics import (
    CLICK_OPS,
    STANDARD,
    element_correct,
    gold_action_text,
    normalise_op,
    op_f1,
    predicted_action_text,
    step_success,
)

OPS = CLICK_OPS | {"TYPE", "SELECT"}
FUZZY_RATIO = 0.72
_REPR = re.compile(r"^\[(?P<role>[^\]]*)\]\s*(?P<target>.*?)\s*->\s*(?P<op>[A-Za-z]+)"
                   r"(?:\s*:\s*(?P<value>.*))?$", re.S)
ROLE_EQUIVALENTS = {"searchbox": {"textbox", "searchbox"}, "textbox": {"textbox", "searchbox"},
                    "combobox": {"combobox", "listbox", "option", "select"},
                    "option": {"option", "combobox"}}


def _folded(text: str) -> str:
    return clean(text).lower()


@dataclass(frozen=True)
class GoldStep:
    """What one step expects: op, value, positive backend ids and the action repr."""

    op: str
    value: str
    positive_ids: frozenset[str]
    action_repr: str


@dataclass(frozen=True)
class Action:
    op: str
    ref: str
    value: str = ""


@dataclass(frozen=True)
class Result:
    correct: bool  # step success
    element_correct: bool  # under the server's empty-positive rule
    op_correct: bool
    op_f1: float
    match: str  # "positive" | "fuzzy" (no positive candidate; the repr matches) | "none"


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
    expected, actual = _folded(expected), _folded(actual)
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


def expected_refs(gold: GoldStep, snapshot: Snapshot, rule: str = STANDARD) -> list[str]:
    """The refs of `snapshot` that `judge` accepts as this step's target under `rule`."""
    return [e.ref for e in snapshot.elements if element_correct(element_match(gold, e), rule)]


def gold_value(gold: GoldStep) -> str:
    return gold.value or _repr_parts(gold.action_repr)[2]


def judge(gold: GoldStep, snapshot: Snapshot, action: Action, rule: str = STANDARD) -> Result:
    """The result of `action` (ref in `snapshot`) on the step `gold`, under `rule`."""
    element = snapshot.element(action.ref)
    match = "none" if element is None else element_match(gold, element)
    element_ok = element_correct(match, rule)
    f1 = op_f1(predicted_action_text(action.op, action.value),
               gold_action_text(gold.op, gold_value(gold)))
    return Result(step_success(element_ok, f1), element_ok,
                  normalise_op(action.op) == normalise_op(gold.op), f1, match)
