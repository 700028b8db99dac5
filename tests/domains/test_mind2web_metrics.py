"""Mind2Web metrics on a hand-checked example (every expected number worked out by hand)."""

import pytest

from evolving_rl.domains.mind2web_metrics import (
    REFERENCE_FALLBACK,
    STANDARD,
    StepOutcome,
    element_correct,
    first_error_action_accuracy,
    gold_action_text,
    op_f1,
    predicted_action_text,
    split_metrics,
    step_success,
    task_metrics,
)


def test_op_f1_token_sets():
    assert op_f1("CLICK", "CLICK") == 1.0
    assert op_f1("TYPE new york", "TYPE new york") == 1.0
    # pred {TYPE, new}, gold {TYPE, new, york}: p = 2/2, r = 2/3, F1 = 2*(2/3)/(5/3) = 0.8
    assert op_f1("TYPE new", "TYPE new york") == pytest.approx(0.8)
    assert op_f1("CLICK", "TYPE boston") == 0.0
    assert op_f1("", "") == 1.0 and op_f1("", "CLICK") == 0.0
    # punctuation tokens are dropped: {SELECT, 2} vs {SELECT, 2}
    assert op_f1("SELECT 2 ,", "SELECT 2") == 1.0


def test_action_strings_follow_mindact():
    assert gold_action_text("CLICK", "ignored") == "CLICK"  # a gold click has no value
    assert gold_action_text("hover", "") == "CLICK" and gold_action_text("ENTER", "x") == "CLICK"
    assert gold_action_text("TYPE", " wool socks ") == "TYPE wool socks"
    assert predicted_action_text("click", "go now") == "CLICK go now"  # a prediction keeps it
    assert predicted_action_text("CLICK", "") == "CLICK"


def test_the_three_examples_of_issue_24():
    # punctuation tokens dropped: {SELECT, Price, low, to, high} vs {SELECT, Price:, low, to,
    # high}: 4 in common, p = r = 4/5
    assert op_f1(predicted_action_text("SELECT", "Price : low to high"),
                 gold_action_text("SELECT", "Price: low to high")) == pytest.approx(0.8)
    # case-sensitive: only TYPE in common, p = r = 1/3; so not a step success
    f1 = op_f1(predicted_action_text("TYPE", "Wool Socks"), gold_action_text("TYPE", "wool socks"))
    assert f1 == pytest.approx(1 / 3) and not step_success(True, f1)
    # a click sent with a two-word value: p = 1/3, r = 1
    assert op_f1(predicted_action_text("CLICK", "go now"),
                 gold_action_text("CLICK", "")) == pytest.approx(0.5)


def test_element_correct_under_each_empty_positive_rule():
    assert element_correct("positive", STANDARD) and element_correct("positive", REFERENCE_FALLBACK)
    assert not element_correct("fuzzy", STANDARD) and element_correct("fuzzy", REFERENCE_FALLBACK)
    assert not element_correct("none", REFERENCE_FALLBACK)
    with pytest.raises(ValueError):
        element_correct("positive", "lenient")


def test_task_and_split_metrics_by_hand():
    # task A: 3 steps; step 2 picks the wrong element, step 3 has op F1 0.8
    task_a = [StepOutcome(True, 1.0), StepOutcome(False, 1.0), StepOutcome(True, 0.8)]
    # task B: 1 step, fully right
    task_b = [StepOutcome(True, 1.0)]
    a = task_metrics(task_a)
    assert a.element_accuracy == pytest.approx(2 / 3)
    assert a.op_f1 == pytest.approx(2.8 / 3)
    assert a.step_success_rate == pytest.approx(1 / 3)
    assert a.task_success_rate == 0.0
    split = split_metrics([task_a, task_b])
    # macro: (2/3 + 1) / 2, (2.8/3 + 1) / 2, (1/3 + 1) / 2, (0 + 1) / 2
    assert split.element_accuracy == pytest.approx(5 / 6)
    assert split.op_f1 == pytest.approx((2.8 / 3 + 1) / 2)
    assert split.step_success_rate == pytest.approx(2 / 3)
    assert split.task_success_rate == 0.5
    assert split.n_tasks == 2
    assert split.as_dict("web/")["web/task_success_rate"] == 0.5


def test_first_error_accuracy_differs_from_step_success():
    # episodes stopped at the first error: 2 of 3 attempted, 1 of 1, 0 of 1
    assert first_error_action_accuracy([(2, 3), (1, 1), (0, 1)]) == pytest.approx(5 / 9)
    with pytest.raises(ValueError):
        first_error_action_accuracy([(2, 1)])
    assert split_metrics([]).n_tasks == 0 and task_metrics([]).task_success_rate == 0.0
    with pytest.raises(ValueError):
        StepOutcome(True, 1.5)
