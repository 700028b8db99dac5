"""Fixtures of the checks that import SGLang; they run only in the child pytest of
tests/slime_upstream/test_overlay_checks.py, whose PYTHONPATH puts SGLang's overlay, the torchvision
stand-in, slime and Megatron-LM first (tests/slime_upstream/child_pytest.py).

transformers is told the truth, that this environment has no torchvision, before anything imports
it (tests/slime_upstream/stand_ins/torchvision). `submitted_argv` (fixture `launch`: both scripts)
runs a train script for real with a stub `ray` on PATH and returns the exact argument list it
gives slime's train.py; `slime_parse` runs slime's `parse_args` on one (fixture `alfworld_args`);
`cpu_accelerator` makes the CPU slime's accelerator.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torchvision
import yaml

from tests import upstream

torchvision.hide_torchvision_from_transformers()

ROOT = upstream.ROOT
TRAIN_SCRIPTS = (ROOT / "scripts/alfworld/train_alfworld.sh", ROOT / "scripts/web/train_web.sh")
# config.json of Qwen2.5-7B-Instruct: what slime's HF check compares with slime's
# scripts/models/qwen2.5-7B.sh (slime/backends/megatron_utils/arguments.py:96-150).
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
             "vocab_size": 152064, "max_position_embeddings": 32768,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
# The stub records the argument list of every call, NUL-separated, one file per call.
RAY_STUB = """#!/bin/bash
n=$(ls "$STUB_DIR"/calls 2>/dev/null | wc -l)
mkdir -p "$STUB_DIR/calls" && printf '%s\\0' "$@" > "$STUB_DIR/calls/$(printf %03d "$n")"
"""
# Our env and retrieval servers are not what these tests check (tests/slime runs them): the
# interpreter the script calls answers their launchers' start/stop and runs everything else.
PYTHON_SHIM = """#!/bin/bash
if [ "$1" = -m ] && [[ "$2" == env.* ]]; then exit 0; fi
exec {python} "$@"
"""
FORK_ROUTER = '__version__ = "0.3.2+slime"\n'  # the image's router, for the launch's stack check


@pytest.fixture(scope="session")
def pins() -> tuple[Path, Path]:
    """slime's and Megatron-LM's source folders."""
    return upstream.slime_dir(), upstream.megatron_dir()


def _default(script: Path, name: str) -> str:
    match = re.search(rf'^{name}="\$\{{{name}:-([^}}]*)\}}"', script.read_text(), flags=re.M)
    assert match, f"{script.name} has no default {name}"
    return match.group(1)


def _launch_env(script: Path, folder: Path, slime: Path, megatron: Path,
                config: Path | None, prepared: Path | None) -> dict[str, str]:
    """Everything a train script checks for, in `folder`; slime and Megatron are the pins'. The
    config and prepared data are the script's own (empty splits, the retrieval cache a stand-in
    file) unless given."""
    model = folder / "Qwen2.5-7B-Instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(QWEN25_7B))
    Path(f"{model}_torch_dist").mkdir()
    if prepared is None:
        prepared = folder / "prepared"
        prepared.mkdir()
        for split in [_default(script, "TRAIN_SPLIT"), *_default(script, "EVAL_SPLITS").split()]:
            (prepared / f"{split}.jsonl").write_text("")
    if config is None:
        values = yaml.safe_load(Path(ROOT, _config_of(script)).read_text())
        values["retrieval"]["cache_path"] = str(folder / "cache.npz")  # checked, not read
        (folder / "cache.npz").write_text("")
        config = folder / "config.yaml"
        config.write_text(yaml.safe_dump(values))
    bin_dir, fork = folder / "bin", folder / "router/sglang_router"
    bin_dir.mkdir()
    fork.mkdir(parents=True)
    (fork / "__init__.py").write_text(FORK_ROUTER)
    for name, text in (("ray", RAY_STUB), ("python", PYTHON_SHIM.format(python=sys.executable))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(bin_dir / "python"),
            "PYTHONPATH": str(fork.parent), "HOME": str(folder), "STUB_DIR": str(folder),
            "CONFIG": str(config), "SLIME_DIR": str(slime), "MEGATRON_DIR": str(megatron),
            "MODEL_DIR": str(model), "PREPARED_DIR": str(prepared), "RUN_DIR": str(folder / "run")}


def _config_of(script: Path) -> str:
    match = re.search(r'\$\{CONFIG:-\$ROOT/([^}]+)\}', script.read_text())
    assert match, f"{script.name} names no default CONFIG"
    return match.group(1)


def submitted_argv(script: Path, folder: Path, slime: Path, megatron: Path,
                   config: Path | None = None, prepared: Path | None = None,
                   overrides: dict[str, str] | None = None,
                   args: tuple[str, ...] = ()) -> list[str]:
    """The arguments `script` gives slime's train.py (after `python3 <slime>/train.py`), with
    the script's environment `overrides` (e.g. PROMPTS_PER_ROLLOUT) and extra `args`."""
    env = {**_launch_env(script, folder, slime, megatron, config, prepared), **(overrides or {})}
    result = subprocess.run(["bash", str(script), *args], env=env, capture_output=True,
                            text=True, timeout=300, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    calls = [path.read_bytes().decode().split("\0")[:-1]
             for path in sorted((folder / "calls").iterdir())]
    submit = next(call for call in calls if call[:2] == ["job", "submit"])
    command = submit[submit.index("--") + 1:]
    assert command[:2] == ["python3", str(slime / "train.py")]
    return command[2:]


@pytest.fixture(scope="session", params=TRAIN_SCRIPTS, ids=lambda p: p.name)
def launch(request, pins, tmp_path_factory) -> tuple[Path, list[str]]:
    """(script, the exact train.py arguments it submits) for each train script."""
    slime, megatron = pins
    folder = tmp_path_factory.mktemp(request.param.stem)
    return request.param, submitted_argv(request.param, folder, slime, megatron)


def slime_parse(argv: list[str]) -> tuple[Namespace, set[str], list[str]]:
    """slime's real `parse_args` on `argv` through the package's own check
    (src/evolving_rl/slime_bridge/validate.py, what the recipe's dry run runs): (args, the option
    strings of every parser that ran, the validators that ran, in order). Without a GPU,
    Megatron's architecture probe (TP > 1) is answered 9, Hopper, the reference run's GPUs."""
    from evolving_rl.slime_bridge.validate import slime_parse as parse

    parsed = parse(argv)
    return parsed.args, set(parsed.declared), list(parsed.validators)


@pytest.fixture(scope="session")
def alfworld_args(pins, tmp_path_factory) -> Namespace:
    """What slime makes of scripts/alfworld/train_alfworld.sh's exact command line."""
    slime, megatron = pins
    argv = submitted_argv(TRAIN_SCRIPTS[0], tmp_path_factory.mktemp("alfworld_args"), slime,
                          megatron)
    return slime_parse(argv)[0]


@pytest.fixture(scope="session")
def cpu_accelerator(pins):
    """The CPU as slime's accelerator, installed through slime's own backend API
    (slime/utils/accelerator/__init__.py:221 `set_accelerator`), as slime's tests do
    (tests/test_accelerator.py:10-50): its registered backends are CUDA and MUSA only."""
    from slime.utils import accelerator

    class CpuAccelerator(accelerator.Accelerator):
        name = device_type = "cpu"
        communication_backend_name = "gloo"

        def is_available(self) -> bool:
            return True

        def device(self, index=None):
            return accelerator.torch.device("cpu")

        def device_name(self, index=None) -> str:
            return "cpu"

        def set_device(self, index) -> None:
            return None

        def current_device(self) -> str:
            return "cpu"

        def device_count(self) -> int:
            return 0

        def synchronize(self, device=None) -> None:
            return None

        def current_stream(self, device=None):
            return None

        def empty_cache(self) -> None:
            return None

        def mem_get_info(self, device=None) -> tuple[int, int]:
            return 0, 0

        def memory_allocated(self, device=None) -> int:
            return 0

        def memory_reserved(self, device=None) -> int:
            return 0

    accelerator.set_accelerator(CpuAccelerator())
    yield
    accelerator.reset_accelerator()
