"""Judging actions: op normalisation, positive and fuzzy targets, values, MindAct's op F1."""

from __future__ import annotations

import pytest

from env.mind2web.snapshot import build_snapshot
from env.mind2web.validate import Action, GoldStep, expected_refs, judge, op_f1

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
    assert result.value_correct is None and result.op_f1 == 1.0


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


@pytest.mark.parametrize(("sent", "ok"), [("new york", True), ("  New   YORK ", True),
                                          ("New Jersey", False), ("", False)])
def test_type_values_match_case_and_space_insensitively(sent, ok):
    gold = _gold("TYPE", {"20"}, value="New York")
    result = judge(gold, SNAP, Action("TYPE", _ref("20"), sent))
    assert result.value_correct is ok and result.correct is ok and result.element_correct


def test_select_value_falls_back_on_the_action_repr():
    gold = _gold("SELECT", {"30"}, "[combobox]  Cabin class -> SELECT: First")
    assert judge(gold, SNAP, Action("SELECT", _ref("30"), "first")).correct
    assert not judge(gold, SNAP, Action("SELECT", _ref("30"), "Economy")).correct


def test_no_positive_candidate_uses_role_and_fuzzy_text():
    textbox = _gold("TYPE", set(), "[textbox]  Where to -> TYPE: Paris", "Paris")
    result = judge(textbox, SNAP, Action("TYPE", _ref("20"), "paris"))  # searchbox ~ textbox
    assert result.correct and result.match == "fuzzy"
    assert not judge(textbox, SNAP, Action("TYPE", _ref("50"), "paris")).element_correct
    similar = _gold("CLICK", set(), "[span]  UA 1240 nonstop -> CLICK")  # a typo'd number
    assert judge(similar, SNAP, Action("CLICK", _ref("40"))).match == "fuzzy"
    unrelated = _gold("CLICK", set(), "[span]  Weekend deals in Lisbon -> CLICK")
    assert judge(unrelated, SNAP, Action("CLICK", _ref("40"))).match == "none"
    wrong_role = _gold("CLICK", set(), "[button]  UA 1204 nonstop -> CLICK")
    assert judge(wrong_role, SNAP, Action("CLICK", _ref("40"))).match == "none"
    assert expected_refs(wrong_role, SNAP) == []
    assert expected_refs(_gold("CLICK", {"50"}), SNAP) == [_ref("50")]


def test_op_f1_is_mindacts_token_f1():
    gold = _gold("TYPE", {"20"}, value="new york city")
    assert op_f1(Action("TYPE", "e1", "new york city"), gold) == 1.0
    assert op_f1(Action("TYPE", "e1", "new jersey"), gold) == pytest.approx(4 / 7)  # p 2/3, r 2/4
    assert op_f1(Action("CLICK", "e1"), gold) == 0.0
    assert op_f1(Action("ENTER", "e1", "ignored"), _gold("CLICK", {"1"})) == 1.0
    assert op_f1(Action("SELECT", "e1", "First"), _gold("CLICK", {"1"})) == 0.0
