"""What the evaluation settles before any work: a missing `--local` checkpoint stops eval.sh with
one line (and the checkpoints that exist) before any stored case is read or any server starts; a
resumed evaluation with every case already stored under its key starts no server and loads no
model, and reports the stored cases; cases of another checkpoint in a folder of the same name,
another setting, other data, or stored without a key are set aside and not reused; a device
torch cannot use here stops it with exit 2 before the stored cases are set aside; a truncated
prepared split stops it with exit 2 and one line naming the file and line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evolving_rl.config import Config, load_config
from evolving_rl.evaluate import runner
from evolving_rl.evaluate.policies import PolicySpec
from evolving_rl.evaluate.provenance import eval_key
from evolving_rl.evaluate.report import write_report
from evolving_rl.evaluate.runner import (
    CASES_FILE,
    EvalRequest,
    UnusableDeviceError,
    run_evaluation,
)
from evolving_rl.pipeline.eval_records import ArmRecord, CaseRecord, CaseStore
from evolving_rl.pipeline.evaluation import EvalProtocol
from evolving_rl.retrieval.prepared import read_split
from tests.fakes.checkpoint import checkpoint_spec
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


def _eval_sh(*args: str, **env: str) -> subprocess.CompletedProcess:
    """scripts/alfworld/eval.sh with `args`, this interpreter and `env` added."""
    return subprocess.run(["bash", "scripts/alfworld/eval.sh", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, **env})


def test_a_missing_local_checkpoint_exits_2_with_one_line_before_any_server(tmp_path):
    saved = tmp_path / "runs" / "local_cpu" / "checkpoints"
    for name in ("step_0001", "step_0003"):
        (saved / name).mkdir(parents=True)
        (saved / name / "config.json").write_text("{}")
    out = tmp_path / "out"
    result = _eval_sh("--local", str(saved / "step_0002"), "--config", str(_config(tmp_path)),
                      "--out", str(out))
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


def _request(out: Path, repeats: int = 2) -> EvalRequest:
    return EvalRequest(out_dir=out, splits=("valid_unseen",), repeats=repeats,
                       protocols=(EvalProtocol.REFERENCE,))


def _store_every_case(cfg: Config, spec: PolicySpec | None, out: Path) -> CaseStore:
    """Every case of `_request(out)`, stored under `spec`'s key (None: unkeyed, as before)."""
    request = _request(out)
    rows = {split: read_split(cfg.alfworld.prepared_dir, split) for split in request.splits}
    key = None if spec is None else eval_key(cfg, spec, rows, request.train_split,
                                              request.retrieval_split, None).key
    store = CaseStore(out / CASES_FILE, key)
    store.append(_case("valid_unseen", f"valid_unseen-{i}", TYPES[i % 2], r)
                 for r in range(2) for i in range(4))
    return store


def _refuse(*_args, **_kwargs):
    raise AssertionError("nothing may start when every case is stored")


def test_a_finished_evaluation_starts_nothing_when_resumed(tmp_path, monkeypatch, caplog):
    cfg = load_config(_config(tmp_path))
    spec = checkpoint_spec(tmp_path / "step_0003")
    out = tmp_path / "out"
    _store_every_case(cfg, spec, out)
    monkeypatch.setattr(runner, "_services", _refuse)
    with caplog.at_level("INFO"):
        outcome = run_evaluation(cfg, spec, _request(out), _refuse)
        again = run_evaluation(cfg, spec, _request(out), _refuse)  # the same request twice
    assert again == outcome
    metrics = outcome.results["valid_unseen"]["reference"]
    assert metrics["eval/cases"] == 8 and metrics["eval/all/without_skill_success_mean"] == 0.0
    assert "all 8 cases are already in" in caplog.text
    write_report(out, {"policy": spec.describe(), **outcome.key.as_meta()}, outcome.results)
    report = (out / "report.md").read_text()
    assert f"Computed from: policy {spec.describe()} digest {outcome.key.policy}" in report
    assert f"data digest {outcome.key.data}" in report
    with pytest.raises(AssertionError):  # one case missing: the run has work to do
        run_evaluation(cfg, spec, _request(out, repeats=3), _refuse)


def _new_weights(tmp_path: Path, cfg: Config) -> tuple[Config, PolicySpec]:
    return cfg, checkpoint_spec(tmp_path / "step_0003", weights=b"trained again")


def _new_setting(tmp_path: Path, cfg: Config) -> tuple[Config, PolicySpec]:
    pipeline = dataclasses.replace(cfg.pipeline, max_steps=cfg.pipeline.max_steps + 1)
    return dataclasses.replace(cfg, pipeline=pipeline), checkpoint_spec(tmp_path / "step_0003")


def _new_data(tmp_path: Path, cfg: Config) -> tuple[Config, PolicySpec]:
    split = tmp_path / "prepared" / "valid_unseen.jsonl"
    split.write_text(split.read_text().replace("task 1", "task one"))
    return cfg, checkpoint_spec(tmp_path / "step_0003")


@pytest.mark.parametrize("change", [_new_weights, _new_setting, _new_data])
def test_cases_of_another_checkpoint_config_or_data_are_set_aside(tmp_path, monkeypatch,
                                                                    change):
    cfg = load_config(_config(tmp_path))
    out = tmp_path / "out"
    old = _store_every_case(cfg, checkpoint_spec(tmp_path / "step_0003"), out)
    cfg, spec = change(tmp_path, cfg)
    monkeypatch.setattr(runner, "_services", _refuse)
    with pytest.raises(AssertionError, match="nothing may start"):  # nothing reused
        run_evaluation(cfg, spec, _request(out), _refuse)
    assert not old.path.exists()  # set aside, not deleted
    assert len(CaseStore(out / f"cases-{old.key}.jsonl", old.key).load()) == 8


def test_cases_stored_without_a_key_are_not_reused(tmp_path, monkeypatch, caplog):
    cfg = load_config(_config(tmp_path))
    out = tmp_path / "out"
    _store_every_case(cfg, None, out)
    monkeypatch.setattr(runner, "_services", _refuse)
    with caplog.at_level("WARNING"), pytest.raises(AssertionError, match="nothing may start"):
        run_evaluation(cfg, checkpoint_spec(tmp_path / "step_0003"), _request(out), _refuse)
    assert "not reused: it has no key" in caplog.text
    assert len(CaseStore(out / "cases-unkeyed.jsonl").load()) == 8


def test_a_missing_checkpoint_is_refused_before_its_namesakes_cases_are_read(tmp_path):
    """The cases of the real step_0003 in the default --out do not answer for runs/nope."""
    cfg_path = _config(tmp_path)
    out = tmp_path / "runs" / "eval" / "config-step_0003"
    store = _store_every_case(load_config(cfg_path), checkpoint_spec(tmp_path / "step_0003"),
                              out)
    before = store.path.read_bytes()
    result = _eval_sh("--local", str(tmp_path / "nope" / "step_0003"), "--config",
                      str(cfg_path), "--out", str(out), "--splits", "valid_unseen",
                      "--repeats", "2")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"no checkpoint at {tmp_path / 'nope' / 'step_0003'} (no config.json)" in line
    assert sorted(p.name for p in out.iterdir()) == [CASES_FILE]
    assert store.path.read_bytes() == before


def test_an_unusable_device_exits_2_before_the_stored_cases_are_set_aside(tmp_path):
    """`--device cuda` where torch sees no CUDA device: the cases of the cpu run stay where the
    rerun with `--device cpu` finds them, and nothing starts."""
    cfg_path = _config(tmp_path)
    out = tmp_path / "out"
    step = tmp_path / "step_0003"
    store = _store_every_case(load_config(cfg_path), checkpoint_spec(step), out)
    before = store.path.read_bytes()
    result = _eval_sh("--local", str(step), "--device", "cuda", "--config", str(cfg_path),
                      "--out", str(out), "--splits", "valid_unseen", "--repeats", "3",
                      "--no-servers", CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]  # after the warning that the key differs
    assert "--device: 'cuda' but " in line and line.endswith("--device cpu")
    assert f"{out / CASES_FILE} is untouched" in line
    assert sorted(p.name for p in out.iterdir()) == [CASES_FILE]
    assert store.path.read_bytes() == before


def test_the_retrieval_device_is_checked_when_the_servers_start_here(tmp_path, monkeypatch):
    cfg = load_config(_config(tmp_path), ["retrieval.device=meta"])
    out = tmp_path / "out"
    spec = checkpoint_spec(tmp_path / "step_0003")
    store = _store_every_case(cfg, spec, out)
    before = store.path.read_bytes()
    monkeypatch.setattr(runner, "_services", _refuse)
    with pytest.raises(UnusableDeviceError, match=r"retrieval\.device: 'meta'.*"
                                                  r"--set retrieval\.device=cpu"):
        run_evaluation(cfg, spec, _request(out, repeats=3), _refuse)
    assert store.path.read_bytes() == before and not (tmp_path / "never_written.npz").exists()


def test_a_finished_evaluation_needs_no_usable_device(tmp_path, monkeypatch):
    """Cases run on a GPU machine are reported on one without it: no model is loaded."""
    cfg = load_config(_config(tmp_path))
    spec = dataclasses.replace(checkpoint_spec(tmp_path / "step_0003"), device="meta")
    _store_every_case(cfg, spec, tmp_path / "out")
    monkeypatch.setattr(runner, "_services", _refuse)
    outcome = run_evaluation(cfg, spec, _request(tmp_path / "out"), _refuse)
    assert outcome.results["valid_unseen"]["reference"]["eval/cases"] == 8


def test_a_truncated_prepared_split_exits_2_with_one_line_naming_file_and_line(tmp_path):
    cfg_path = _config(tmp_path)
    split = tmp_path / "prepared" / "valid_unseen.jsonl"
    lines = split.read_text().splitlines(keepends=True)
    split.write_text("".join(lines[:2]) + lines[2][:40])  # cut mid-line, as a full disk leaves it
    result = _eval_sh("--local", checkpoint_spec(tmp_path / "s").path, "--config", str(cfg_path),
                      "--out", str(tmp_path / "out"), "--splits", "valid_unseen", "--no-servers")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{split}:3: invalid JSON" in line
