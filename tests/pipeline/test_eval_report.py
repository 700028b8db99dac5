"""The evaluation report from case records, against hand-computed numbers; and the case store."""

from __future__ import annotations

import json

import pytest

from evolving_rl.domains.mind2web import Mind2WebAdapter
from evolving_rl.pipeline.eval_records import ArmRecord, CaseRecord, CaseStore
from evolving_rl.pipeline.eval_report import summarize


def _arm(success: bool, score: float | None = None, measures=None) -> ArmRecord:
    score = (1.0 if success else 0.0) if score is None else score
    return ArmRecord("completed", score, success, 3, measures or {})


def _case(task: str, task_type: str, repeat: int, without: bool, with_: bool | None,
          protocol: str = "reference") -> CaseRecord:
    return CaseRecord(protocol, "valid_unseen", task, task_type, repeat, "r",
                      with_ is not None, _arm(without),
                      _arm(with_) if with_ is not None else None)


def _none(_measures) -> dict[str, float]:
    return {}


# repeat 0: a (A) with 1 / without 0, b (A) with 1 / without 1, c (B) no skill / without 0
# repeat 1: a with 0 / without 0, b with 1 / without 0, c no skill / without 1
CASES = [_case("a", "A", 0, False, True), _case("b", "A", 0, True, True),
         _case("c", "B", 0, False, None), _case("a", "A", 1, False, False),
         _case("b", "A", 1, False, True), _case("c", "B", 1, True, None)]


def test_rates_per_repeat_then_mean_and_population_std():
    out = summarize(CASES, _none, train_types={"A"})
    # with skill, repeat 0: a 1, b 1, c (plain) 0 -> 2/3; repeat 1: 0, 1, 1 -> 2/3
    assert out["eval/all/with_skill_success_mean"] == pytest.approx(2 / 3)
    assert out["eval/all/with_skill_success_std"] == pytest.approx(0.0)
    # without: repeat 0 -> 1/3, repeat 1 -> 1/3
    assert out["eval/all/without_skill_success_mean"] == pytest.approx(1 / 3)
    # pooled over both repeats: with skill 4 wins of 6 episodes, without 2 of 6
    assert (out["eval/all/with_skill_wins"], out["eval/all/with_skill_scored"]) == (4.0, 6.0)
    assert (out["eval/all/without_skill_wins"], out["eval/all/without_skill_scored"]) == (2.0, 6.0)
    assert out["eval/task_type/B/without_skill_wins"] == 1.0
    # type A with skill: repeat 0 -> 1, repeat 1 -> 1/2: mean .75, pstdev .25
    assert out["eval/task_type/A/with_skill_success_mean"] == pytest.approx(0.75)
    assert out["eval/task_type/A/with_skill_success_std"] == pytest.approx(0.25)
    assert out["eval/group/training_types/with_skill_success_mean"] == pytest.approx(0.75)
    # held out = type B: without skill 0 then 1
    assert out["eval/group/held_out_types/without_skill_success_mean"] == pytest.approx(0.5)
    assert out["eval/group/held_out_types/without_skill_success_std"] == pytest.approx(0.5)
    assert out["eval/skill_obtained_rate"] == pytest.approx(4 / 6)
    assert out["eval/group/held_out_types/cases"] == 2.0  # c, twice
    assert out["eval/group/held_out_types/skill_obtained_rate"] == 0.0
    assert out["eval/task_type/A/skill_obtained_rate"] == 1.0
    assert out["eval/cases"] == 6.0 and out["eval/repeats"] == 2.0
    assert out["eval/infra_failures"] == 0.0


def test_order_does_not_matter_and_infra_failures_leave_the_rates():
    assert summarize(CASES[::-1], _none) == summarize(CASES, _none)
    failed = CaseRecord("reference", "valid_unseen", "d", "A", 0, None, False,
                        ArmRecord("env_error", None, False, 0))
    out = summarize([*CASES[:3], failed], _none)
    assert out["eval/all/without_skill_success_mean"] == pytest.approx(1 / 3)
    assert out["eval/infra_failures"] == 1.0


def test_no_skill_protocol_reports_only_the_plain_arm():
    cases = [_case("a", "A", 0, True, None, "no_skill"), _case("b", "A", 0, False, None,
                                                               "no_skill")]
    out = summarize(cases, _none)
    assert out["eval/all/without_skill_success_mean"] == 0.5
    assert not any("with_skill" in key for key in out)
    with pytest.raises(ValueError, match="one protocol"):
        summarize([*cases, CASES[0]], _none)


def test_web_standard_metrics_per_arm():
    adapter = Mind2WebAdapter(mode="eval")
    # task x: steps (el, f1) = (1, 1), (0, .5), (1, 1): element 2/3, F1 5/6, step SR 2/3, task 0,
    # first error at step 1 -> 1 of 2; task y: all right -> 1, 1, 1, 1, first error 2 of 2.
    x = {"steps": [[True, 1.0], [False, 0.5], [True, 1.0]], "first_error": [1, 2]}
    y = {"steps": [[True, 1.0], [True, 1.0]], "first_error": [2, 2]}
    cases = [CaseRecord("reference", "test_task", t, "Travel/Air", 0, None, False,
                        ArmRecord("completed", s, s == 1.0, n, m))
             for t, s, n, m in (("x", 2 / 3, 3, x), ("y", 1.0, 2, y))]
    out = summarize(cases, adapter.eval_metrics)
    assert out["eval/all/without_skill_element_accuracy_mean"] == pytest.approx((2 / 3 + 1) / 2)
    assert out["eval/all/without_skill_op_f1_mean"] == pytest.approx((5 / 6 + 1) / 2)
    assert out["eval/all/without_skill_step_success_rate_mean"] == pytest.approx((2 / 3 + 1) / 2)
    assert out["eval/all/without_skill_task_success_rate_mean"] == pytest.approx(0.5)
    assert out["eval/all/without_skill_first_error_action_accuracy_mean"] == pytest.approx(0.75)
    assert out["eval/all/without_skill_success_mean"] == pytest.approx(0.5)


def test_case_store_round_trips_and_survives_a_torn_last_line(tmp_path):
    store = CaseStore(tmp_path / "cases.jsonl")
    store.append(CASES[:2])
    with store.path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(CASES[2].to_json())[:40])  # killed mid-write
    assert list(store.load().values()) == CASES[:2]
    store.append(CASES[2:])
    assert sorted(store.load().values(), key=lambda r: r.key) == sorted(CASES,
                                                                        key=lambda r: r.key)
