"""The main job's pieces (metrics log, plot, eval selection, the config its servers get) and,
slow-marked, the whole job on a shortened config in a fresh data folder (generation included)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from env.launch import (
    add_config_arguments,
    config_arguments,
    config_from_args,
    free_port,
    free_port_block,
)
from evolving_rl.config import load_config, parse_config
from evolving_rl.local.job import archive_previous_run, eval_rows, splits_of
from evolving_rl.local.metrics import MetricsLog, group_variance
from evolving_rl.local.plots import plot_run
from evolving_rl.retrieval.prepared import PreparedData, PreparedDataError

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_run_archives_the_previous_run_under_a_new_name_each_time(tmp_path):
    run = tmp_path / "run"
    MetricsLog.in_run_dir(run).write("eval", 0, {"phase": "before"})
    (run / "checkpoints" / "step_0003").mkdir(parents=True)
    first = archive_previous_run(run)
    assert MetricsLog.in_run_dir(run).read() == [] and not (run / "checkpoints").exists()
    assert len(MetricsLog(first / "metrics.jsonl").read()) == 1
    assert (first / "checkpoints" / "step_0003").is_dir()
    assert archive_previous_run(run) is None  # nothing but archives: a no-op
    (run / "skill_library.jsonl").write_text("{}\n")
    second = archive_previous_run(run)  # within the same second: a new folder all the same
    assert second != first and (second / "skill_library.jsonl").read_text() == "{}\n"
    assert sorted(p.name for p in first.iterdir()) == ["checkpoints", "metrics.jsonl"]


def test_metrics_log_round_trip(tmp_path):
    log = MetricsLog.in_run_dir(tmp_path / "run")
    log.write("eval", 0, {"phase": "before", "eval/all/with_skill_success_mean": 0.5})
    log.write("train", 1, {"solver/reward_mean": math.nan, "groups/count": 4.0,
                           "groups/zero_variance": 1.0, "groups/solver/count": 3.0,
                           "groups/solver/zero_variance": 1.0, "groups/extractor/count": 1.0,
                           "groups/extractor/zero_variance": 0.0})
    records = log.read()
    assert [r["kind"] for r in records] == ["eval", "train"]
    assert records[1]["solver/reward_mean"] is None and log.read("train")[0]["step"] == 1
    assert group_variance(records[1]) == {
        "groups": 4.0, "varied_groups": 3.0, "varied_fraction": 0.75, "extractor_groups": 1.0,
        "extractor_varied_groups": 1.0, "solver_groups": 3.0, "solver_varied_groups": 2.0}


def test_plot_is_written(tmp_path):
    records = [{"kind": "eval", "step": 0, "phase": "before",
                "eval/all/without_skill_success_mean": 0.2},
               {"kind": "train", "step": 1, "solver/reward_mean": 0.1,
                "extractor/reward_mean": -0.1, "source/success_rate": 0.0},
               {"kind": "train", "step": 2, "solver/reward_mean": 0.3},
               {"kind": "eval", "step": 2, "phase": "after",
                "eval/all/with_skill_success_mean": 0.4,
                "eval/all/with_skill_success_std": 0.1}]
    path = plot_run(records, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_rows_round_robin_over_task_types(tmp_path):
    rows = [{"id": f"{t}{i}", "question": "q", "metadata": {"task_type": t, "game": "g"}}
            for t in ("b", "a") for i in range(3)]
    (tmp_path / "valid_unseen.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = parse_config({"alfworld": {"prepared_dir": str(tmp_path)},
                        "local": {"n_eval_games": 3}})
    assert [r["id"] for r in eval_rows(cfg, PreparedData.read(cfg))] == ["a0", "b0", "a1"]
    (tmp_path / "valid_unseen.jsonl").rename(tmp_path / "train.jsonl")
    with pytest.raises(PreparedDataError, match="no prepared split 'valid_unseen'.*: train\\)"):
        eval_rows(cfg, PreparedData.read(cfg))


def test_an_evaluation_names_the_splits_its_rows_came_from():
    rows = [{"id": str(i), "metadata": {"split": split}}
            for i, split in enumerate(("valid", "valid", "train"))]
    assert splits_of(rows[:2]) == "valid" and splits_of(rows) == "train,valid"


def test_the_servers_get_the_jobs_config():
    """The launchers hand the job's `Config` to each server process on its command line."""
    cfg = load_config(ROOT / "configs" / "local_cpu.yaml", ["local.train_steps=1"])
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert config_from_args(parser.parse_args(config_arguments(cfg))) == cfg
    moved = config_from_args(parser.parse_args([*config_arguments(cfg), "--set",
                                                "retrieval.port=9"]), ["alfworld.n_workers=3"])
    assert moved == dataclasses.replace(
        cfg, retrieval=dataclasses.replace(cfg.retrieval, port=9),
        alfworld=dataclasses.replace(cfg.alfworld, n_workers=3))


@pytest.mark.slow
def test_main_job_on_a_fresh_data_folder(tmp_path):
    """The README's main-job command, shortened: 1 game per type, 1 step, 1 eval game."""
    port = free_port_block(3)  # router + the CPU default's 2 workers
    retrieval_port = free_port(exclude=range(port, port + 3))
    overrides = {
        "alfworld.data_root": tmp_path / "data", "alfworld.prepared_dir": tmp_path / "prepared",
        "alfworld.port": port, "alfworld.worker_base_port": port + 1,
        "alfworld.log_dir": tmp_path / "logs", "retrieval.port": retrieval_port,
        "retrieval.cache_path": tmp_path / "cache.npz", "retrieval.log_dir": tmp_path / "logs",
        "run.output_dir": tmp_path / "run", "local.games_per_type": 1, "local.train_steps": 1,
        "local.n_eval_games": 1, "pipeline.max_steps": 2, "pipeline.source_tasks_per_rollout": 1}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    proc = subprocess.run([sys.executable, "-m", "evolving_rl.local", "--config",
                           "configs/local_cpu.yaml", *sets], cwd=ROOT, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    kinds = [json.loads(line)["kind"] for line in (run / "metrics.jsonl").open()]
    assert kinds == ["eval", "train", "eval"]
    assert (run / "rewards.png").is_file() and (run / "summary.txt").is_file()
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))  # run.tensorboard: default
    recorded = load_config(run / "config.yaml")
    assert recorded.local.train_steps == 1 and recorded.run.output_dir == str(run)
    assert (run / "checkpoints" / "step_0001" / "config.json").is_file()


@pytest.mark.parametrize(("temperature", "label"), [(0.0, "(greedy)"),
                                                     (1.0, "(sampled at temperature 1)")])
def test_the_summary_names_how_the_evaluation_decoded(tmp_path, temperature, label):
    from evolving_rl.config.schema import SamplingConfig
    from evolving_rl.local.__main__ import summary
    from evolving_rl.local.job import JobResult

    decoding = SamplingConfig(temperature=temperature).decoding()
    text = summary(JobResult(run_dir=tmp_path), 60.0, decoding)
    assert f"Held-out evaluation {label}:" in text.splitlines()[1]


def test_the_summary_lists_every_output_and_the_checkpoint_size(tmp_path):
    from evolving_rl.local.__main__ import summary
    from evolving_rl.local.job import JobResult

    for name in ("metrics.jsonl", "rewards.png", "config.yaml"):
        (tmp_path / name).write_text("x")
    checkpoint = tmp_path / "checkpoints" / "step_0003"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"\0" * 2_000_000)
    (checkpoint / "trainer_state.pt").write_bytes(b"\0" * 3_000_000)
    (tmp_path / "previous-20261202-000000").mkdir()
    text = summary(JobResult(run_dir=tmp_path, checkpoint=checkpoint), 60.0, "greedy")
    assert (f"Outputs in {tmp_path}: checkpoints/, config.yaml, metrics.jsonl, rewards.png, "
            "summary.txt") in text
    assert "(5 MB, of which trainer state 3 MB;" in text
