"""`--help` of the launchers: each prints its header as usage text and exits 0, starting nothing
(the setup, data and model scripts through scripts/lib/usage.sh, before any venv is made).

The train scripts would check their prerequisites and start servers next: with `SLIME_DIR` at a
missing folder, anything past the usage text fails with exit 2.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "scripts/alfworld/eval.sh": "Evaluate a checkpoint on ALFWorld",
    "scripts/web/eval.sh": "Evaluate a checkpoint on Mind2Web",
    "scripts/alfworld/train_alfworld.sh": "Train the solver + extractor policy on ALFWorld",
    "scripts/web/train_web.sh": "Train the solver + extractor policy on Mind2Web",
    "scripts/run_local.sh": "The main job of the embedded default",
    "scripts/alfworld/prepare_data.sh": "Prepare ALFWorld prompt datasets",
    "scripts/alfworld/build_cache.sh": "Build or refresh the ALFWorld retrieval embedding cache",
    "scripts/web/prepare_data.sh": "Prepare Mind2Web prompt datasets",
    "scripts/web/build_cache.sh": "Build or refresh the Mind2Web retrieval embedding cache",
    "scripts/models/get_qwen2.5_coder.sh": "Fetch Qwen2.5-Coder-Instruct",
    "scripts/models/convert_hf_to_torch_dist.sh": "Convert a HuggingFace checkpoint",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_and_launches_nothing(script, flag, tmp_path):
    env = {**os.environ, "SLIME_DIR": str(tmp_path / "no_slime"), "RUN_DIR": str(tmp_path)}
    result = subprocess.run(["bash", script, flag], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=30, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0].startswith(SCRIPTS[script])
    assert not any(line.startswith(("set -", "#!", "ROOT=")) for line in lines)
    assert list(tmp_path.iterdir()) == []


def test_run_local_with_setup_skipped_installs_nothing(tmp_path):
    """EVOLVING_RL_SETUP=skip (an offline node whose interpreter holds the env stack): no venv
    is made or checked, $PYTHON runs the main job with the checkout's src/ on its path."""
    log = tmp_path / "argv"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$PYTHONPATH" "$@" > "{log}"\n')
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    env = {**os.environ, "EVOLVING_RL_SETUP": "skip", "PYTHON": str(fake), "VENV": str(venv),
           "CONFIG": "configs/probe_stated_cpu.yaml"}
    done = subprocess.run(["bash", "scripts/run_local.sh", "--set", "local.train_steps=1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not venv.exists() and "setup_env" not in done.stdout + done.stderr
    assert log.read_text().split() == [
        f"{ROOT}/src:{ROOT}", "-m", "evolving_rl.local", "--config",
        "configs/probe_stated_cpu.yaml", "--set", "local.train_steps=1"]
