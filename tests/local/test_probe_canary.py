"""The learning canary (issue 44, docs/design.md §7.5): plain GRPO on the stated probe rises from
chance to at least 90% greedy success on held-out tasks, through the main job itself
(`python -m evolving_rl.local --config configs/probe_stated_cpu.yaml`: the same data stage,
servers over HTTP, pipeline, rewards, trainer and evaluation as every run), with a randomly
initialised 2-layer character model. Every seed is fixed and episodes run one at a time, so the
run draws the same random numbers whatever the machine's timing; the measured run ends at 100%
against the 90% bar, and before training the model wins none (chance among the answers: 50%).
A pipeline that attaches rewards to the wrong samples or trains on no solver token cannot pass
(the issue's closing note records both broken variants). About a minute on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from env.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "probe_stated_cpu.yaml"


@pytest.mark.timeout(600)
def test_grpo_learns_the_stated_probe_through_the_main_job(tmp_path):
    port = free_port()
    overrides = {"probe.port": port, "retrieval.port": free_port(exclude=[port]),
                 "probe.prepared_dir": tmp_path / "prepared", "probe.log_dir": tmp_path / "logs",
                 "retrieval.cache_path": tmp_path / "cache.npz",
                 "retrieval.log_dir": tmp_path / "logs", "local.models_dir": tmp_path / "models",
                 "run.output_dir": tmp_path / "run"}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    proc = subprocess.run([sys.executable, "-m", "evolving_rl.local", "--config", str(PROFILE),
                           *sets], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    before, after = (r["eval/all/without_skill_success_mean"] for r in records
                     if r["kind"] == "eval")
    train = [r["solver/success_rate"] for r in records if r["kind"] == "train"]
    assert records[0]["eval/cases"] == 64 and records[-1]["eval/infra_failures"] == 0
    assert before <= 0.5, f"not at chance before training: {before}"
    assert train[0] <= 0.5, train
    assert after >= 0.9, f"held-out success {after} after training; per step: {train}"
