"""scripts/web/train_web.sh run for real up to slime: `ray` is a stub that records its calls.

With configs/web.yaml on local files (a generated Mind2Web set, prepared; a retrieval cache built
with MiniLM; a stand-in for slime's sglang-router fork, which top-p 0.85 needs) the script starts
our env server and the retrieval server, starts a Ray head, submits slime's train.py with the
run's flags, and when the job ends (here: it fails) stops the job, the Ray head and both servers by
their PID files, and exits with the job's status. The stub removes the original config while the
job runs: the servers still stop, from the run's own copy in RUN_DIR. Marked slow: two servers start and stop (about
40 s on two busy cores).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from slime_fixtures import ROOT, WEB_TRAIN_SCRIPT

from env.launch import free_port
from env.mind2web.generate import GenerateSpec, generate
from env.mind2web.prepare import prepare
from evolving_rl.retrieval import build

PASSWORD = "launch"
JOB_STATUS = 7
# The stub logs every call; at `job submit` it keeps the servers' PID files (the servers run).
RAY_STUB = """#!/bin/bash
echo "$*" >> "$STUB_DIR/calls"
if [ "$1 $2" = "job submit" ]; then
    rm "$STUB_DIR/web.yaml"  # the original config, removed mid-run: the run stops from its copy
    cp "$STUB_DIR"/logs/*/*.pid "$STUB_DIR/" && exit {status}
fi
"""


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (an exited process not yet reaped by init counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _fake_run(tmp_path: Path) -> dict[str, str]:
    """Data, cache, slime and model stand-ins and the stub `ray`: the script's environment."""
    data = generate(tmp_path / "root", GenerateSpec(tasks=12, seed=2, password=PASSWORD))
    prepared = tmp_path / "prepared"
    prepare(data.root, prepared, password=PASSWORD)
    profile = yaml.safe_load((ROOT / "configs/web.yaml").read_text())  # here, on local files
    profile["mind2web"] = {"data_root": str(data.root), "prepared_dir": str(prepared),
                           "server_cache_dir": str(tmp_path / "server_cache"),
                           "port": free_port(), "log_dir": str(tmp_path / "logs/env")}
    profile["retrieval"] = {"model": "minilm", "device": "cpu", "port": free_port(),
                            "cache_path": str(tmp_path / "c.npz"),
                            "log_dir": str(tmp_path / "logs/retrieval")}
    config = tmp_path / "web.yaml"
    config.write_text(yaml.safe_dump(profile))
    assert build.main(["--config", str(config)]) == 0
    slime, model = tmp_path / "slime", tmp_path / "model"
    (slime / "scripts/models").mkdir(parents=True)
    (slime / "train.py").write_text("")
    (slime / "scripts/models/qwen2.5-7B.sh").write_text("MODEL_ARGS=(--num-layers 28)\n")
    for folder in (model, Path(f"{model}_torch_dist"), tmp_path / "bin"):
        folder.mkdir()
    (tmp_path / "bin/ray").write_text(RAY_STUB.format(status=JOB_STATUS))
    (tmp_path / "bin/ray").chmod(0o755)
    fork = tmp_path / "router_fork/sglang_router"  # the image's router, for the stack check
    fork.mkdir(parents=True)
    (fork / "__init__.py").write_text('__version__ = "0.3.2+slime"\n')
    return {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PYTHON": sys.executable,
            "PYTHONPATH": str(fork.parent),
            "HOME": str(tmp_path), "STUB_DIR": str(tmp_path), "CONFIG": str(config),
            "SLIME_DIR": str(slime), "MODEL_DIR": str(model), "PREPARED_DIR": str(prepared),
            "RUN_DIR": str(tmp_path / "run"), "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
def test_the_web_run_starts_everything_and_stops_what_it_started(tmp_path):
    env = _fake_run(tmp_path)
    result = subprocess.run(["bash", str(WEB_TRAIN_SCRIPT), "--extra-flag", "x"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == JOB_STATUS, result.stderr

    calls = (tmp_path / "calls").read_text().splitlines()
    assert [call.split()[:2] for call in calls] == \
        [["start", "--head"], ["job", "list"], ["job", "submit"], ["job", "stop"], ["stop"]]
    submit = calls[2].split()
    command = submit[submit.index("--") + 1:]
    assert command[:2] == ["python3", str(tmp_path / "slime/train.py")]
    assert command[-2:] == ["--extra-flag", "x"]
    for flag, value in [("--num-layers", "28"), ("--num-rollout", "200"),
                        ("--save-interval", "50"), ("--eval-interval", "25"),
                        ("--rollout-top-p", "0.85"), ("--entropy-coef", "0"),
                        ("--prompt-data", str(tmp_path / "prepared/train.jsonl"))]:
        assert command[command.index(flag) + 1] == value, flag
    evals = command[command.index("--eval-prompt-data") + 1:command.index("--eval-temperature")]
    assert evals[::2] == ["test_task", "test_website", "test_domain"]
    custom = yaml.safe_load((tmp_path / "run/slime_custom_config.yaml").read_text())
    assert custom == {"evolving_rl_config": str(tmp_path / "run/config.yaml")}
    copy = yaml.safe_load((tmp_path / "run/config.yaml").read_text())
    assert copy["mind2web"]["port"] > 0
    assert copy["run"]["output_dir"] == str(tmp_path / "run")  # the skill library's folder

    pids = [int(path.read_text()) for path in tmp_path.glob("*.pid")]
    assert len(pids) == 2, "both servers ran while the job was submitted"
    assert not any(_alive(pid) for pid in pids)
    assert not list((tmp_path / "logs").glob("*/*.pid"))
