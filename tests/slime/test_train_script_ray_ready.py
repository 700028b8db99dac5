"""The launch waits for Ray's job API before `ray job submit` (scripts/lib/slime_launch.sh).

A minimal `ray` (no `ray[default]`) starts a head whose dashboard serves no job API, and `ray job
submit` then dies with a connection traceback (seen on 2026-12-03 with the project's CPU venv).
The launch probes the API with `ray job list` once a second, for up to RAY_READY_TIMEOUT_S. Here
`ray` is a stub whose `job list` fails its first N calls; our servers' launchers are no-ops (the
interpreter shim answers `-m env.*`), so nothing real starts and nothing depends on timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from slime_fixtures import ROOT

SCRIPT = ROOT / "scripts/alfworld/train_alfworld.sh"
RAY_STUB = """#!/bin/bash
echo "$*" >> "$STUB_DIR/calls"
if [ "$1 $2" = "job list" ]; then
    n=$(grep -c '^job list' "$STUB_DIR/calls")
    [ "$n" -gt "$FAILED_LISTS" ] || exit 1
fi
[ "$1 $2" = "job submit" ] && printf '%s\\0' "$@" > "$STUB_DIR/submit"
exit 0
"""
PYTHON_SHIM = """#!/bin/bash
if [ "$1" = -m ] && [[ "$2" == env.* ]]; then exit 0; fi
exec {python} "$@"
"""


def _environment(tmp_path: Path, failed_lists: int) -> dict[str, str]:
    slime, model, prepared, bin_dir = (tmp_path / name for name in
                                       ("slime", "model", "prepared", "bin"))
    (slime / "scripts/models").mkdir(parents=True)
    (slime / "train.py").write_text("")
    (slime / "scripts/models/qwen2.5-7B.sh").write_text("MODEL_ARGS=(--num-layers 28)\n")
    for folder in (model, Path(f"{model}_torch_dist"), prepared, bin_dir):
        folder.mkdir()
    for split in ("train_seen", "valid_unseen", "valid_seen"):
        (prepared / f"{split}.jsonl").write_text("")
    values = yaml.safe_load((ROOT / "configs/alfworld.yaml").read_text())
    values["retrieval"]["cache_path"] = str(tmp_path / "cache.npz")  # checked, not read
    (tmp_path / "cache.npz").write_text("")
    (tmp_path / "alfworld.yaml").write_text(yaml.safe_dump(values))
    fork = tmp_path / "router/sglang_router"  # the image's router, for the stack check (top-p 0.9)
    fork.mkdir(parents=True)
    (fork / "__init__.py").write_text('__version__ = "0.3.2+slime"\n')
    for name, text in (("ray", RAY_STUB), ("python", PYTHON_SHIM.format(python=sys.executable))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(bin_dir / "python"),
            "PYTHONPATH": str(fork.parent), "HOME": str(tmp_path), "STUB_DIR": str(tmp_path),
            "FAILED_LISTS": str(failed_lists), "RAY_READY_TIMEOUT_S": "3",
            "CONFIG": str(tmp_path / "alfworld.yaml"), "SLIME_DIR": str(slime),
            "MODEL_DIR": str(model), "PREPARED_DIR": str(prepared),
            "RUN_DIR": str(tmp_path / "run")}


def _launch(tmp_path: Path, failed_lists: int) -> tuple[subprocess.CompletedProcess, list]:
    result = subprocess.run(["bash", str(SCRIPT)], env=_environment(tmp_path, failed_lists),
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    calls = [line.split()[:2] for line in (tmp_path / "calls").read_text().splitlines()]
    return result, calls


def test_the_job_is_submitted_once_the_job_api_answers(tmp_path):
    result, calls = _launch(tmp_path, failed_lists=2)
    assert result.returncode == 0, result.stderr[-2000:]
    assert calls == [["start", "--head"], ["job", "list"], ["job", "list"], ["job", "list"],
                     ["job", "submit"], ["job", "stop"], ["stop"]]


def test_the_job_gets_the_callers_pythonpath_and_a_tensorboard_folder_in_the_run(tmp_path):
    """slime's --use-tensorboard writes to TENSORBOARD_DIR, else relative to the Ray job's working
    directory (slime/observability/tensorboard_utils.py:44), where the 2026-12-03 one-GPU run's
    events were never found; a `pip --target` overlay on the caller's PYTHONPATH must reach the
    job, whose runtime env replaces PYTHONPATH."""
    result, _ = _launch(tmp_path, failed_lists=0)
    assert result.returncode == 0, result.stderr[-2000:]
    submit = (tmp_path / "submit").read_bytes().decode().split("\0")[:-1]
    runtime = json.loads(submit[submit.index("--runtime-env-json") + 1])["env_vars"]
    assert runtime["TENSORBOARD_DIR"] == str(tmp_path / "run/tensorboard")
    assert runtime["PYTHONPATH"].split(":")[-1] == str(tmp_path / "router")


def test_a_job_api_that_never_answers_stops_the_launch_with_a_reason(tmp_path):
    result, calls = _launch(tmp_path, failed_lists=99)
    assert result.returncode == 2
    assert "job API at 127.0.0.1:8265 never answered" in result.stderr
    assert "ray[default]" in result.stderr
    assert calls == [["start", "--head"]] + [["job", "list"]] * 3 + [["stop"]]
