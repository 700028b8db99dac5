"""What the evaluation settles before any work: a missing `--local` checkpoint stops eval.sh with
one line (and the checkpoints that exist) before any server starts; a resumed evaluation with
every case already stored starts no server and loads no model, and reports the stored cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evolving_rl.config import load_config
from evolving_rl.evaluate import runner
from evolving_rl.evaluate.runner import CASES_FILE, EvalRequest, run_evaluation
from evolving_rl.pipeline.eval_records import ArmRecord, CaseRecord, CaseStore
from evolving_rl.pipeline.evaluation import EvalProtocol
from tests.servers import ROOT

TYPES = ("pick_and_place_simple", "pick_heat_then_place_in_recep")


def _config(tmp_path: Path) -> Path:
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    for split in ("train", "valid_seen", "valid_unseen"):
        rows = [{"id": f"{split}-{i}", "question": f"task {i}", "prompt": "",
                 "metadata": {"task_type": TYPES[i % 2], "game": f"{split}/{i}/game.tw-pddl",
                              "split": split}} for i in range(4)]
        (prepared / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = yaml.safe_load((ROOT / "configs/local_cpu.yaml").read_text())
    data["alfworld"]["prepared_dir"] = str(prepared)
    data["retrieval"]["cache_path"] = str(tmp_path / "never_written.npz")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_missing_local_checkpoint_exits_2_with_one_line_before_any_server(tmp_path):
    saved = tmp_path / "runs" / "local_cpu" / "checkpoints"
    for name in ("step_0001", "step_0003"):
        (saved / name).mkdir(parents=True)
        (saved / name / "config.json").write_text("{}")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", "scripts/alfworld/eval.sh", "--local", str(saved / "step_0002"), "--config",
         str(_config(tmp_path)), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"no checkpoint at {saved / 'step_0002'} (no config.json)" in line
    assert str(saved / "step_0001") in line and str(saved / "step_0003") in line
    assert not out.exists() and not (tmp_path / "never_written.npz").exists()


def _case(split: str, task_id: str, task_type: str, repeat: int) -> CaseRecord:
    arm = ArmRecord("completed", 0.0, False, 6)
    return CaseRecord(protocol="reference", split=split, task_id=task_id, task_type=task_type,
                      repeat=repeat, retrieved_id="train-0", skill_obtained=False,
                      without_skill=arm)


def test_a_finished_evaluation_starts_nothing_when_resumed(tmp_path, monkeypatch, caplog):
    cfg = load_config(_config(tmp_path))
    out = tmp_path / "out"
    CaseStore(out / CASES_FILE).append(
        _case("valid_unseen", f"valid_unseen-{i}", TYPES[i % 2], r)
        for r in range(2) for i in range(4))

    def refuse(*_args, **_kwargs):
        raise AssertionError("nothing may start when every case is stored")

    monkeypatch.setattr(runner, "_services", refuse)
    request = EvalRequest(out_dir=out, splits=("valid_unseen",), repeats=2,
                          protocols=(EvalProtocol.REFERENCE,))
    with caplog.at_level("INFO"):
        outcome = run_evaluation(cfg, refuse, request)
    metrics = outcome.results["valid_unseen"]["reference"]
    assert metrics["eval/cases"] == 8 and metrics["eval/all/without_skill_success_mean"] == 0.0
    assert "all 8 cases are already in" in caplog.text
    with pytest.raises(AssertionError):  # one case missing: the run has work to do
        run_evaluation(cfg, refuse, EvalRequest(out_dir=out, splits=("valid_unseen",),
                                                repeats=3, protocols=(EvalProtocol.REFERENCE,)))
