"""The learning comparison's report (`evaluate.learning_report`) on run folders written by the
real loggers: our hooks' `log_rollout` / `log_eval_rollout` and slime's own `logging_utils.log`
into slime's TensorBoard sink (train and perf dicts as slime's model.py and train_metric_utils.py
shape them), and the local backend's `MetricsLog`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slime_fixtures import real_slime, realistic_samples

from evolving_rl import slime_hooks
from evolving_rl.core.stats import Pooled, fisher_exact
from evolving_rl.evaluate import learning_report as report
from evolving_rl.local.metrics import MetricsLog, group_variance
from evolving_rl.slime_bridge import samples as sample_bridge
from evolving_rl.slime_bridge import slime_api
from evolving_rl.slime_bridge.metrics import eval_metrics

DATASET = "valid_learn16"
# Per step: (source success, downstream success, varied solver groups of 8, KL, grad norm).
STEPS = [(0.125, 0.0625, 2, 0.0, 0.31), (0.25, 0.2, 5, 0.004, 0.42), (0.5, 0.45, 6, 0.011, 0.38)]
# Held-out (wins, episodes) per arm: before, after.
EVALS = {"before": {"without_skill": (1, 16), "with_skill": (2, 16)},
         "after": {"without_skill": (11, 16), "with_skill": (12, 16)}}


def pipeline_metrics(source: float, solver: float, varied: int) -> dict[str, float]:
    """The pipeline's metrics of one step, as `run_training_rollout` names them."""
    return {"source/success_rate": source, "solver/success_rate": solver,
            "extractor/reward_mean": solver - 0.02, "groups/count": 12.0,
            "groups/zero_variance": 12.0 - varied - 1, "groups/solver/count": 8.0,
            "groups/solver/zero_variance": 8.0 - varied, "groups/extractor/count": 4.0,
            "groups/extractor/zero_variance": 3.0, "timing/wall_s": 40.0 + varied}


def eval_record(phase: str) -> dict[str, float]:
    out = {}
    for arm, (wins, n) in EVALS[phase].items():
        out |= {f"eval/all/{arm}_wins": float(wins), f"eval/all/{arm}_scored": float(n),
                f"eval/all/{arm}_success_mean": wins / n}
    return out | {"eval/cases": 16.0}


@pytest.fixture
def slime_run(tmp_path, monkeypatch, slime_args, slime_types):
    """A launch's RUN_DIR/tensorboard as slime's sink writes it: eval before, 3 steps of
    (our rollout log, slime's train log, slime's perf log), eval after."""
    from slime.observability import logging_utils
    from slime.observability.tensorboard_utils import _TensorboardAdapter

    run_dir = tmp_path / "slime_evolving"
    monkeypatch.setenv("TENSORBOARD_DIR", str(run_dir / report.TB_DIR))
    monkeypatch.setattr(slime_api, "default_rollout_metrics", lambda args, s, t: {})
    _TensorboardAdapter.clear_instances()
    slime_args.use_tensorboard, slime_args.tb_project_name = True, None
    slime_args.tb_experiment_name, slime_args.wandb_always_use_train_step = None, False
    data = {DATASET: {"rewards": [], "truncated": [], "samples": []}}
    slime_hooks.log_eval_rollout(0, slime_args, data,
                                 eval_metrics({DATASET: eval_record("before")}))
    groups = sample_bridge.to_slime_groups(realistic_samples(), slime_types.sample)
    flat = [sample for group in groups for sample in group]
    for rollout_id, (source, solver, varied, kl, grad) in enumerate(STEPS):
        slime_hooks.log_rollout(rollout_id, slime_args, flat,
                                pipeline_metrics(source, solver, varied), 30.0 + rollout_id)
        logging_utils.log(slime_args, {"train/loss": 0.01, "train/kl_loss": kl,
                                       "train/grad_norm": grad, "train/lr-pg_0": 2e-6,
                                       "train/step": rollout_id}, step_key="train/step")
        logging_utils.log(slime_args, {"perf/train_time": 50.0 + rollout_id,
                                       "perf/update_weights_time": 0.1,
                                       "rollout/step": rollout_id}, step_key="rollout/step")
    slime_hooks.log_eval_rollout(len(STEPS) - 1, slime_args, data,
                                 eval_metrics({DATASET: eval_record("after")}))
    _TensorboardAdapter(slime_args).finish()
    _TensorboardAdapter.clear_instances()
    return run_dir


def write_local_run(run_dir: Path, method: str, after: dict[str, tuple[int, int]]) -> Path:
    """A local run's metrics.jsonl, written by the local job's own `MetricsLog`."""
    log = MetricsLog.in_run_dir(run_dir)
    log.write("eval", 0, {"phase": "before", "protocol": "reference", **eval_record("before")})
    for step, (source, solver, varied, kl, grad) in enumerate(STEPS, start=1):
        metrics = pipeline_metrics(source, solver, varied)
        if method == "grpo_baseline":
            metrics["solver/success_rate"] = source
        log.write("train", step, {**metrics, **group_variance(metrics), "train/kl": kl,
                                  "train/grad_norm": grad, "train/duration_s": 9.0})
    record = {f"eval/all/{arm}_{k}": float(v) for arm, (w, n) in after.items()
              for k, v in (("wins", w), ("scored", n))}
    log.write("eval", len(STEPS), {"phase": "after", "protocol": "reference", **record})
    return run_dir


@real_slime
def test_a_slime_launch_reads_back_per_step_and_before_after(slime_run):
    run = report.read_slime_run(slime_run, "slime")
    assert sorted(run.steps) == [1, 2, 3]
    for step, (source, solver, varied, kl, grad) in enumerate(STEPS, start=1):
        m = run.steps[step]
        assert m["rollout/pipeline/source/success_rate"] == pytest.approx(source)
        assert m["rollout/pipeline/solver/success_rate"] == pytest.approx(solver)
        assert m["solver_varied_groups"] == varied and m["extractor_varied_groups"] == 1
        assert m["train/kl_loss"] == pytest.approx(kl) and m["train/grad_norm"] == \
            pytest.approx(grad)
        assert m["rollout/time_s"] == pytest.approx(29.0 + step)
        assert m["perf/train_time"] == pytest.approx(49.0 + step)
    assert run.wins("before", "without_skill") == Pooled(1, 16)
    assert run.wins("after", "with_skill") == Pooled(12, 16)


@real_slime
def test_the_report_tables_held_out_wins_with_fisher_p(slime_run, tmp_path):
    runs = {("slime", "evolving"): [report.read_slime_run(slime_run, "slime")],
            ("local", "evolving"): [
                report.read_local_run(write_local_run(tmp_path / f"l{seed}", "evolving", after),
                                      f"seed {seed}")
                for seed, after in enumerate([{"without_skill": (10, 16)},
                                              {"without_skill": (13, 16)}])],
            ("local", "grpo_baseline"): [report.read_local_run(
                write_local_run(tmp_path / "b0", "grpo_baseline", {"without_skill": (9, 16)}),
                "seed 0")]}
    rows = {(r.backend, r.method, r.arm): r for r in report.held_out_table(runs)}
    slime_full = rows[("slime", "evolving", "without_skill")]
    assert (slime_full.before, slime_full.after) == (Pooled(1, 16), Pooled(11, 16))
    assert slime_full.p_after_vs_before == pytest.approx(
        fisher_exact(Pooled(11, 16), Pooled(1, 16)))
    assert slime_full.p_after_vs_before < 0.001
    assert slime_full.p_vs_baseline is None  # no slime baseline launch given
    local_full = rows[("local", "evolving", "without_skill")]  # two seeds pooled
    assert (local_full.before, local_full.after) == (Pooled(2, 32), Pooled(23, 32))
    assert local_full.p_vs_baseline == pytest.approx(fisher_exact(Pooled(23, 32), Pooled(9, 16)))
    assert rows[("local", "grpo_baseline", "without_skill")].p_vs_baseline is None
    assert ("local", "evolving", "with_skill") in rows  # before only: the after run had none

    out = report.write_report(runs, tmp_path / "report")
    text = out.read_text()
    assert "| slime | evolving | without skill | 1/16 (6.2%) | 11/16 (68.8%) |" in text
    assert "| 3 | 50.0% | 45.0% |" in text  # slime's step 3: success per role
    assert (tmp_path / "report" / "learning_curves.png").stat().st_size > 10_000


def test_local_runs_alone_and_the_command_line(tmp_path, capsys):
    write_local_run(tmp_path / "full", "evolving", {"without_skill": (12, 16)})
    write_local_run(tmp_path / "base", "grpo_baseline", {"without_skill": (4, 16)})
    assert report.main(["--local", f"evolving={tmp_path / 'full'}",
                        "--local", f"grpo_baseline={tmp_path / 'base'}",
                        "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "learning_report.md").read_text()
    p = fisher_exact(Pooled(12, 16), Pooled(4, 16))
    assert "| local | evolving | without skill | 1/16 (6.2%) | 12/16 (75.0%) | " in text
    assert f"{p:.3g} |" in text
    with pytest.raises(SystemExit):
        report.main(["--local", f"ppo={tmp_path / 'full'}", "--out", str(tmp_path / "x")])


def test_a_slime_run_without_events_says_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="--use-tensorboard"):
        report.read_slime_run(tmp_path, "empty")


def test_local_records_are_read_as_the_local_job_writes_them(tmp_path):
    run = report.read_local_run(write_local_run(tmp_path / "r", "evolving",
                                                {"without_skill": (3, 16)}), "r")
    assert run.series("train/kl") == {1: 0.0, 2: 0.004, 3: 0.011}
    assert run.series("solver_varied_groups") == {1: 2.0, 2: 5.0, 3: 6.0}
    assert run.wins("after", "without_skill") == Pooled(3, 16)
    assert json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])["phase"] \
        == "before"


def test_a_run_without_an_after_evaluation_is_named_not_silently_pooled(tmp_path):
    full = report.read_local_run(write_local_run(tmp_path / "s1", "grpo_baseline",
                                                 {"without_skill": (12, 16)}), "seed 1")
    stopped = report.RunCurves("seed 2", steps=dict(full.steps),
                               evals={"before": full.evals["before"]})
    runs = {("local", "grpo_baseline"): [full, stopped]}
    row = next(r for r in report.held_out_table(runs) if r.arm == "without_skill")
    assert (row.before, row.after) == (Pooled(2, 32), Pooled(12, 16))
    text = report.render_markdown(report.held_out_table(runs), runs)
    assert "left out of its pooled counts" in text and "local grpo_baseline seed 2 (after)" in text
    assert "seed 1 (" not in text.split("## Per step")[0]
