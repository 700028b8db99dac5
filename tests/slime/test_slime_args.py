"""The one source of slime's flags (src/evolving_rl/slime_bridge/args.py, settings.config_flags):
what the module prints follows the config, a contradicting extra flag is refused by the module
and by the launch before anything starts, a weight check saves nothing unless asked, and the
hooks' run-time check reads the same list. tests/slime_upstream/overlay/check_launch_args.py runs
the generated command lines through slime's real parser and validators."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from slime_fixtures import ROOT, TRAIN_SCRIPTS, default_config

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.args import WEIGHT_CHECK, contradictions, save_flags
from evolving_rl.slime_bridge.settings import _expected_args, config_flags

SLIME_PROFILES = sorted(p for p in (ROOT / "configs").glob("*.yaml")
                        if not p.name.startswith("local_"))


def _module(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolving_rl.slime_bridge.args", *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


def _value(tokens: list[str], flag: str) -> str:
    return tokens[tokens.index(flag) + 1]


@pytest.mark.parametrize("profile", SLIME_PROFILES, ids=lambda p: p.name)
def test_the_module_prints_each_decided_flag_once_for_every_profile(profile):
    run = _module("--config", str(profile))
    assert run.returncode == 0, run.stderr
    tokens = run.stdout.splitlines()
    flags = [t for t in tokens if t.startswith("--")]
    assert len(flags) == len(set(flags)) and "--kl-loss-coef" not in flags
    config = load_config(profile)
    assert float(_value(tokens, "--lr")) == config.loss.lr
    assert int(_value(tokens, "--rollout-batch-size")) == config.pipeline.source_tasks_per_rollout
    assert float(_value(tokens, "--rollout-top-p")) == config.sampling.solver.top_p


def test_a_changed_config_value_reaches_the_flag(tmp_path):
    values = yaml.safe_load((ROOT / "configs/alfworld.yaml").read_text())
    values["loss"].update(lr=3.5e-6, clip_eps_high=0.2, grad_clip=0.5)
    values["pipeline"]["source_tasks_per_rollout"] = 5
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(values))
    tokens = _module("--config", str(path)).stdout.splitlines()
    assert (_value(tokens, "--lr"), _value(tokens, "--eps-clip-high"),
            _value(tokens, "--clip-grad"), _value(tokens, "--rollout-batch-size")) == \
        ("3.5e-06", "0.2", "0.5", "5")


def test_a_contradicting_extra_flag_is_refused_and_an_agreeing_one_kept():
    flags = config_flags(load_config(ROOT / "configs/alfworld.yaml"))
    assert contradictions(flags, ["--lr", "1e-6", "--eps-clip=0.1", "--use-kl-loss"]) == []
    problems = contradictions(flags, ["--lr", "1e-5", "--rollout-batch-size", "4",
                                      "--eps-clip=0.3", "--debug-rollout-only"])
    assert [p.split(":")[0] for p in problems] == \
        ["--rollout-batch-size 4", "--eps-clip 0.3", "--lr 1e-5"]
    assert "loss.lr" in problems[2] and "pipeline.source_tasks_per_rollout" in problems[0]
    run = _module("--config", "configs/alfworld.yaml", "--", "--lr", "1e-5")
    assert run.returncode == 2 and run.stdout == "" and "loss.lr" in run.stderr


def test_a_weight_check_saves_nothing_unless_asked():
    assert save_flags("/ck", "25", []) == ["--save", "/ck", "--save-interval", "25"]
    assert save_flags("/ck", "25", [WEIGHT_CHECK]) == []
    assert save_flags("/ck", "25", [WEIGHT_CHECK, "--save-interval", "1"]) == \
        ["--save", "/ck", "--save-interval", "25"]
    assert save_flags("/ck", "", []) == []
    run = _module("--config", "configs/alfworld.yaml", "--save-dir", "/ck", "--save-interval",
                  "25", "--", WEIGHT_CHECK)
    assert run.returncode == 0 and "--save" not in run.stdout.splitlines()


def test_the_hooks_check_reads_the_same_flags():
    config = load_config(ROOT / "configs/alfworld.yaml")
    expected = {name: value for name, value, _ in _expected_args(config)}
    for flag in config_flags(config):
        if flag.dest in expected:
            assert expected[flag.dest] == flag.value, flag.flag
    assert {"lr", "eps_clip", "rollout_batch_size", "rollout_top_p", "clip_grad"} <= set(expected)


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_the_launch_refuses_a_contradiction_before_anything_starts(tmp_path, script):
    """Every prerequisite present, a stub `ray` that records calls: `--lr 1e-5` against the
    config's loss.lr stops the launch with exit 2, no ray call, no run folder."""
    slime, model, prepared = tmp_path / "slime", tmp_path / "model", tmp_path / "prepared"
    config = yaml.safe_load(default_config(script).read_text())
    config.setdefault("retrieval", {})["cache_path"] = str(tmp_path / "cache.npz")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    text = script.read_text()
    train = "train_seen" if "alfworld" in script.name else "train"
    evals = text.split('EVAL_SPLITS="${EVAL_SPLITS:-')[1].split("}")[0].split()
    for path in [slime / "train.py", slime / "scripts/models/qwen2.5-7B.sh",
                 prepared / f"{train}.jsonl", *(prepared / f"{s}.jsonl" for s in evals),
                 tmp_path / "cache.npz"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    for folder in (model, Path(f"{model}_torch_dist"), tmp_path / "bin"):
        folder.mkdir(parents=True)
    (tmp_path / "bin/ray").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/ray_calls\n')
    (tmp_path / "bin/ray").chmod(0o755)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PYTHON": sys.executable,
           "HOME": str(tmp_path), "CONFIG": str(tmp_path / "config.yaml"),
           "SLIME_DIR": str(slime), "MODEL_DIR": str(model), "PREPARED_DIR": str(prepared),
           "RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(["bash", str(script), "--lr", "1e-5"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "loss.lr" in run.stderr, run.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "ray_calls").exists()


def test_the_run_seed_is_slimes_seed_and_rollout_seed(tmp_path):
    """slime's defaults (--seed 1234, --rollout-seed 42) would make every seed of a comparison
    the same run: both come from run.seed."""
    values = yaml.safe_load((ROOT / "configs/alfworld_1gpu_learn.yaml").read_text())
    values.setdefault("run", {})["seed"] = 7
    path = tmp_path / "seeded.yaml"
    path.write_text(yaml.safe_dump(values))
    tokens = _module("--config", str(path)).stdout.splitlines()
    assert (_value(tokens, "--seed"), _value(tokens, "--rollout-seed")) == ("7", "7")
