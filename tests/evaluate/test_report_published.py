"""The evaluation report compares with the published numbers only for the task-type groups the
run measured (a run without a training / held-out split says so instead of a table of "–"), and
its per-type rows find every task type's numbers."""

from __future__ import annotations

from evolving_rl.evaluate.report import write_report

META = {"environment": "alfworld", "policy": "scripted", "protocols": ["reference"],
        "repeats": 1, "solver_decoding": "sampled at temperature 1"}
ALL = {"eval/all/cases": 4.0, "eval/all/with_skill_success_mean": 0.5,
       "eval/all/with_skill_success_std": 0.0, "eval/all/without_skill_success_mean": 0.25,
       "eval/all/without_skill_success_std": 0.0, "eval/skill_obtained_rate": 1.0}
HELD_OUT = {"eval/group/held_out_types/cases": 2.0,
            "eval/group/held_out_types/with_skill_success_mean": 0.5,
            "eval/group/held_out_types/with_skill_success_std": 0.0,
            "eval/group/held_out_types/without_skill_success_mean": 0.0,
            "eval/group/held_out_types/without_skill_success_std": 0.0}


def _report(tmp_path, metrics):
    write_report(tmp_path, META, {"valid_unseen": {"reference": metrics}})
    return (tmp_path / "report.md").read_text(encoding="utf-8")


def test_without_task_type_groups_no_published_table(tmp_path):
    report = _report(tmp_path, ALL)
    assert "Against the published numbers" not in report and "| GRPO (paper)" not in report
    assert "this run has no such grouping" in report
    assert "solver sampled at temperature 1." in report


def test_only_the_measured_groups_are_compared(tmp_path):
    report = _report(tmp_path, {**ALL, **HELD_OUT})
    assert "| GRPO (paper) | held_out_types | 44.6 | 50.0 ± 0.0 | 0.0 ± 0.0 |" in report
    assert "training_types" not in report.split("Against the published numbers")[1]


def test_a_task_type_holding_a_slash_gets_its_numbers(tmp_path):
    """Mind2Web's task types are domain/subdomain: the report of the slime web run of 2026-12-07
    listed "Travel" with "–" in both arms instead of "Travel/Hotel" with its numbers."""
    hotel = {"eval/task_type/Travel/Hotel/cases": 2.0,
             "eval/task_type/Travel/Hotel/with_skill_success_mean": 0.5,
             "eval/task_type/Travel/Hotel/with_skill_success_std": 0.0,
             "eval/task_type/Travel/Hotel/without_skill_success_mean": 0.0,
             "eval/task_type/Travel/Hotel/without_skill_success_std": 0.0}
    report = _report(tmp_path, {**ALL, **hotel})
    assert "| reference | Travel/Hotel | 50.0 ± 0.0 | 0.0 ± 0.0 |" in report
    assert "| Travel |" not in report
