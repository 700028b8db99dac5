"""The CPU web profile (configs/local_cpu_web.yaml): its evaluation picks and, slow-marked, the
whole main job on Mind2Web shortened in a fresh data folder (task generation included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from env.launch import free_port
from evolving_rl.config import load_config
from evolving_rl.domains.registry import domain_for
from evolving_rl.local.job import check_sampling, eval_rows
from evolving_rl.retrieval.prepared import PreparedData

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "local_cpu_web.yaml"


def test_the_web_profile_is_runnable_locally():
    cfg = load_config(PROFILE)
    assert cfg.environment == "mind2web" and domain_for(cfg).name == "mind2web"
    check_sampling(cfg)  # the local job refuses top-p < 1 for the trained roles


def test_web_eval_rows_come_from_the_registry_split(tmp_path):
    rows = [{"id": f"{t}{i}", "question": "q", "prompt": "q",
             "metadata": {"task_type": t, "split": split}}
            for split, t in (("test_task", "travel/airlines"), ("train", "shopping/general"))
            for i in range(2)]
    for split in ("test_task", "train"):
        (tmp_path / f"{split}.jsonl").write_text("".join(
            json.dumps(r) + "\n" for r in rows if r["metadata"]["split"] == split),
            encoding="utf-8")
    cfg = load_config(PROFILE, [f"mind2web.prepared_dir={tmp_path}", "local.n_eval_games=5"])
    assert [r["id"] for r in eval_rows(cfg, PreparedData.read(cfg))] == [
        "travel/airlines0", "travel/airlines1"]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the job itself: ~3.5 min on 2 cores, more when they are shared
def test_web_main_job_on_a_fresh_data_folder(tmp_path):
    """`CONFIG=configs/local_cpu_web.yaml scripts/run_local.sh`, shortened: 1 step, 1 eval task."""
    port = free_port()
    retrieval_port = free_port(exclude=[port])
    overrides = {
        "mind2web.data_root": tmp_path / "data", "mind2web.prepared_dir": tmp_path / "prepared",
        "mind2web.server_cache_dir": tmp_path / "server_cache", "mind2web.port": port,
        "mind2web.log_dir": tmp_path / "logs", "retrieval.port": retrieval_port,
        "retrieval.cache_path": tmp_path / "cache.npz", "retrieval.log_dir": tmp_path / "logs",
        "run.output_dir": tmp_path / "run", "local.train_steps": 1, "local.n_eval_games": 1,
        "pipeline.max_steps": 2, "pipeline.source_tasks_per_rollout": 1,
        # one source episode is a group of one: kept, so that the step trains on something
        "rewards.drop_zero_variance_groups": False}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    proc = subprocess.run([sys.executable, "-m", "evolving_rl.local", "--config", str(PROFILE),
                           *sets], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "data" / "test.zip").is_file()  # generated, then prepared
    assert (tmp_path / "prepared" / "test_task.jsonl").is_file()
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert [r["kind"] for r in records] == ["eval", "train", "eval"]
    assert records[0]["eval/cases"] == 1 and records[0]["eval/infra_failures"] == 0
    assert records[1]["train/n_samples"] > 0
    assert (run / "rewards.png").is_file() and (run / "summary.txt").is_file()
    assert (run / "checkpoints" / "step_0001" / "config.json").is_file()
