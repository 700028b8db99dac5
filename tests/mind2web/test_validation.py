"""Judging actions: op normalisation, positive targets, the empty-positive rules, values and
MindAct's op F1 and step success (the server's verdicts are `domains.mind2web_metrics`'s)."""

from __future__ import annotations

import pytest

from env.mind2web.snapshot import build_snapshot
from env.mind2web.validate import Action, GoldStep, expected_refs, judge
from evolving_rl.domains.mind2web_metrics import REFERENCE_FALLBACK, StepOutcome

PAGE = ('<html backend_node_id="1"><body backend_node_id="2">'
        '<a backend_node_id="10"><span backend_node_id="11"><text backend_node_id="12">Flights'
        '</text></span></a>'
        '<input backend_node_id="20" type="search" aria_label="Where to?" />'
        '<select backend_node_id="30" aria_label="Cabin class"><option backend_node_id="31">'
        '<text backend_node_id="32">Economy</text></option><option backend_node_id="33">'
        '<text backend_node_id="34">First</text></option></select>'
        '<span backend_node_id="40"><text backend_node_id="41">UA 1204 nonstop</text></span>'
        '<button backend_node_id="50"><text backend_node_id="51">Search</text></button>'
        '</body></html>')
SNAP = build_snapshot(PAGE)


def _ref(backend_id: str) -> str:
    return next(e.ref for e in SNAP.elements if backend_id in e.backend_ids)


def _gold(op: str, positives: set[str], action_repr: str = "", value: str = "") -> GoldStep:
    return GoldStep(op, value, frozenset(positives), action_repr)


@pytest.mark.parametrize("op", ["CLICK", "click", "HOVER", "ENTER"])
def test_click_hover_enter_all_count_as_click(op):
    result = judge(_gold("CLICK", {"11"}), SNAP, Action(op, _ref("11")))
    assert result.correct and result.op_correct and result.match == "positive"
    assert result.op_f1 == 1.0


def test_hover_gold_accepts_click():
    assert judge(_gold("HOVER", {"40"}), SNAP, Action("CLICK", _ref("40"))).correct


def test_wrong_op_or_wrong_element():
    wrong_op = judge(_gold("CLICK", {"50"}), SNAP, Action("TYPE", _ref("50"), "x"))
    assert not wrong_op.correct and wrong_op.element_correct and not wrong_op.op_correct
    assert wrong_op.op_f1 == 0.0
    wrong_el = judge(_gold("CLICK", {"50"}), SNAP, Action("CLICK", _ref("40")))
    assert not wrong_el.correct and not wrong_el.element_correct and wrong_el.match == "none"
    unknown = judge(_gold("CLICK", {"50"}), SNAP, Action("CLICK", "e999"))
    assert not unknown.correct and unknown.match == "none" and unknown.op_correct


def test_a_wrapper_line_counts_for_its_inner_positive():
    assert _ref("10") == _ref("11")
    assert judge(_gold("CLICK", {"11"}), SNAP, Action("CLICK", _ref("10"))).correct


@pytest.mark.parametrize(("sent", "f1"), [("New York", 1.0), ("  New   York ", 1.0),
                                          ("new york", 1 / 3), ("New Jersey", 2 / 3),
                                          ("", 0.5)])
def test_type_values_are_scored_by_mindacts_op_f1(sent, f1):
    gold = _gold("TYPE", {"20"}, value="New York")
    result = judge(gold, SNAP, Action("TYPE", _ref("20"), sent))
    assert result.element_correct and result.op_f1 == pytest.approx(f1)
    assert result.correct is (f1 == 1.0)


def test_select_value_falls_back_on_the_action_repr():
    gold = _gold("SELECT", {"30"}, "[combobox]  Cabin class -> SELECT: First")
    assert judge(gold, SNAP, Action("SELECT", _ref("30"), "First")).correct
    assert not judge(gold, SNAP, Action("SELECT", _ref("30"), "Economy")).correct


# The three disagreements of issue 24, each scored once, by the one rule.
def _issue_cases() -> list[tuple[GoldStep, Action, float]]:
    return [(_gold("SELECT", {"30"}, value="Price: low to high"),
             Action("SELECT", _ref("30"), "Price : low to high"), 0.8),  # ':' dropped: p=r=4/5
            (_gold("TYPE", {"20"}, value="wool socks"),
             Action("TYPE", _ref("20"), "Wool Socks"), 1 / 3),  # case-sensitive: {TYPE} only
            (_gold("CLICK", {"50"}), Action("CLICK", _ref("50"), "go now"), 0.5)]  # p 1/3, r 1


@pytest.mark.parametrize("case", range(3))
def test_issue_examples_get_one_verdict_from_server_and_metrics(case):
    gold, action, f1 = _issue_cases()[case]
    result = judge(gold, SNAP, action)
    assert result.element_correct and result.op_f1 == pytest.approx(f1)
    assert not result.correct  # steps_correct, won, the reward: MindAct's step success
    assert StepOutcome(result.element_correct, result.op_f1).success is result.correct


def test_no_positive_candidate_is_wrong_under_the_standard_rule():
    textbox = _gold("TYPE", set(), "[textbox]  Where to -> TYPE: Paris", "Paris")
    result = judge(textbox, SNAP, Action("TYPE", _ref("20"), "Paris"))
    assert not result.correct and not result.element_correct and result.match == "fuzzy"
    assert result.op_f1 == 1.0  # the operation is still scored
    assert expected_refs(textbox, SNAP) == []
    span_only = _gold("CLICK", set(), "[span]   -> CLICK")  # a role and no text
    assert not any(judge(span_only, SNAP, Action("CLICK", e.ref)).correct for e in SNAP.elements)


def test_reference_fallback_uses_role_and_fuzzy_text():
    textbox = _gold("TYPE", set(), "[textbox]  Where to -> TYPE: Paris", "Paris")
    result = judge(textbox, SNAP, Action("TYPE", _ref("20"), "Paris"), REFERENCE_FALLBACK)
    assert result.correct and result.match == "fuzzy"  # searchbox ~ textbox
    assert not judge(textbox, SNAP, Action("TYPE", _ref("50"), "Paris"),
                     REFERENCE_FALLBACK).element_correct
    similar = _gold("CLICK", set(), "[span]  UA 1240 nonstop -> CLICK")  # a typo'd number
    assert judge(similar, SNAP, Action("CLICK", _ref("40")), REFERENCE_FALLBACK).correct
    unrelated = _gold("CLICK", set(), "[span]  Weekend deals in Lisbon -> CLICK")
    assert judge(unrelated, SNAP, Action("CLICK", _ref("40"))).match == "none"
    wrong_role = _gold("CLICK", set(), "[button]  UA 1204 nonstop -> CLICK")
    assert judge(wrong_role, SNAP, Action("CLICK", _ref("40"))).match == "none"
    assert expected_refs(wrong_role, SNAP, REFERENCE_FALLBACK) == []
    assert expected_refs(_gold("CLICK", {"50"}), SNAP) == [_ref("50")]


def test_op_f1_is_mindacts_token_f1():
    def f1(action: Action, gold: GoldStep) -> float:
        return judge(gold, SNAP, action).op_f1

    gold = _gold("TYPE", {"20"}, value="new york city")
    assert f1(Action("TYPE", "e1", "new york city"), gold) == 1.0
    assert f1(Action("TYPE", "e1", "new jersey"), gold) == pytest.approx(4 / 7)  # p 2/3, r 2/4
    assert f1(Action("CLICK", "e1"), gold) == 0.0
    assert f1(Action("ENTER", "e1"), _gold("CLICK", {"1"})) == 1.0
    assert f1(Action("SELECT", "e1", "First"), _gold("CLICK", {"1"})) == 0.0
