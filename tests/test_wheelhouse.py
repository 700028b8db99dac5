"""scripts/wheelhouse.sh and the offline path of scripts/setup_env.sh.

The fast tests check the scripts' syntax and their answers to bad arguments (exit 2, a message
naming the mistake) and to a missing target interpreter (exit 1, nothing written), and how the
wheelhouse reads pip's resolution: only the wheels it built itself are taken as they are. The
slow test builds a wheelhouse of the env stack for this interpreter's Python version, checks that
the sdist-only wheels were stripped with a correct RECORD, that a second run does nothing, then
installs the project from it into a fresh venv through setup_env.sh with no index, no pip config
and (where `unshare -n` works) no network, and generates one ALFWorld game per task type with the
installed engine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "scripts" / "wheelhouse.sh"
SETUP_ENV = ROOT / "scripts" / "setup_env.sh"
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"

logger = logging.getLogger(__name__)


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("script", [WHEELHOUSE, SETUP_ENV])
def test_scripts_parse(script):
    assert run(["bash", "-n", str(script)]).returncode == 0


@pytest.mark.parametrize(("args", "message"), [
    ([], "DEST (the wheelhouse folder) is required"),
    (["--bogus", "dest"], "unknown option --bogus"),
    (["--python-version"], "--python-version needs a value"),
    (["--python-version", "3", "dest"], "--python-version must look like 3.12"),
    (["--extras", "a b", "dest"], "--extras: a,b,c"),
    (["one", "two"], "one DEST only"),
])
def test_wheelhouse_argument_errors(args, message):
    result = run(["bash", str(WHEELHOUSE), *args])
    assert result.returncode == 2
    assert message in result.stderr


def test_wheelhouse_help():
    result = run(["bash", str(WHEELHOUSE), "--help"])
    assert result.returncode == 0
    assert "Usage: scripts/wheelhouse.sh [options] DEST" in result.stdout


def test_wheelhouse_missing_interpreter(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "WHEELHOUSE_PYTHON"}
    result = run(["bash", str(WHEELHOUSE), "--python-version", "3.99", str(tmp_path / "wh")],
                 env=env)
    assert result.returncode == 1
    assert "no Python 3.99 interpreter" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_wheelhouse_takes_only_its_own_builds_as_built(tmp_path):
    built = tmp_path / "build dir" / "built"
    built.mkdir(parents=True)
    report = tmp_path / "report.json"
    urls = {"jericho": (built / "jericho-3.3.1-py3-none-any.whl").as_uri(),
            "psutil": "file:///opt/wheels/psutil-7.0-cp36-abi3-linux_x86_64.whl",
            "Fast_Downward.TextWorld": "https://files.example/fast_downward-20.6.4.tar.gz",
            "numpy": "https://files.example/numpy-2.0-cp312-manylinux_2_28_x86_64.whl"}
    report.write_text(json.dumps({"install": [
        {"metadata": {"name": name, "version": "1"}, "download_info": {"url": url}}
        for name, url in urls.items()]}))
    script = f'source "{WHEELHOUSE}"; BPY="{sys.executable}"; resolved "$1" "$2"'
    result = run(["bash", "-c", script, "resolved", str(report), str(built)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"jericho 1 built {built / 'jericho-3.3.1-py3-none-any.whl'}",
        "psutil 1 wheel",  # a local mirror's wheel is for this machine: fetched for the target
        "fast-downward-textworld 1 sdist", "numpy 1 wheel"]


@pytest.mark.parametrize(("args", "extra_env", "message"), [
    (["--wheelhouse"], {}, "--wheelhouse needs a folder"),
    ([], {"WHEELHOUSE": "/nonexistent"}, "/nonexistent is no wheelhouse"),
    ([], {"EVOLVING_RL_TORCH": "gpu"}, "EVOLVING_RL_TORCH must be auto, cpu, cuda or skip"),
])
def test_setup_env_argument_errors(tmp_path, args, extra_env, message):
    env = {**os.environ, "VENV": str(tmp_path / "venv"), **extra_env}
    result = run(["bash", str(SETUP_ENV), *args], env=env)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "venv").exists()


def _checked_member_size(wheel: Path, suffix: str) -> int:
    """Size of the wheel's member ending in `suffix`, after checking its RECORD hash."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(suffix))
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = dict(line.split(",", 1) for line in archive.read(record).decode().splitlines())
        data = archive.read(name)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert rows[name].split(",")[0] == f"sha256={digest}"
    return len(data)


def _offline_env(venv: Path, wheelhouse: Path) -> dict[str, str]:
    """No pip config, no index: only the wheelhouse can satisfy the install."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "VENV": str(venv),
            "PYTHON": sys.executable, "WHEELHOUSE": str(wheelhouse), "EVOLVING_RL_TORCH": "skip",
            "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def _no_network_prefix() -> list[str]:
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return ["unshare", "-n"] if probe.returncode == 0 else []


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_wheelhouse_installs_offline(tmp_path):
    house = tmp_path / "wheelhouse"
    build = [str(WHEELHOUSE), "--python-version", PY_VERSION, "--extras", "dev,alfworld,mind2web",
             str(house)]
    started = time.monotonic()
    built = run(["bash", *build], timeout=1500)
    assert built.returncode == 0, built.stdout + built.stderr
    seconds = time.monotonic() - started
    size = sum(p.stat().st_size for p in house.iterdir())
    logger.info("wheelhouse for %s: %.0f s, %.0f MiB", PY_VERSION, seconds, size / 2**20)
    assert "==" in (house / "requirements.txt").read_text()
    downward = next(house.glob("fast_downward_textworld-*.whl"))
    assert _checked_member_size(downward, "fast_downward/libdownward.so") < 5 * 2**20

    again = run(["bash", *build], timeout=1500)
    assert again.returncode == 0 and "is up to date" in again.stdout

    venv = tmp_path / "venv"
    offline = _offline_env(venv, house)
    cut_off = _no_network_prefix()
    installed = run([*cut_off, "bash", str(SETUP_ENV), "dev,alfworld,mind2web"], env=offline,
                    timeout=900)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    games = tmp_path / "games"
    generated = run([*cut_off, str(venv / "bin" / "python"), "-m", "env.alfworld.generate",
                     "--out", str(games), "--per-type", "train=1", "--workers", "1"],
                    env=offline, timeout=300)
    assert generated.returncode == 0, generated.stderr
    assert len(list(games.rglob("*.tw-pddl"))) == 6


def test_the_project_wheel_is_built_from_its_sources_and_package_data(tmp_path):
    """Every file pyproject's package-data names reaches the copy the project's wheel is built
    from (it held *.py only: a wheel without local/notices/ broke the GGUF conversion)."""
    copy = tmp_path / "project"
    done = run(["bash", "-c", f'source "{WHEELHOUSE}"; copy_project "{copy}"'])
    assert done.returncode == 0, done.stderr
    package = ROOT / "src" / "evolving_rl"
    data = [path for pattern in ("local/notices/*.txt", "domains/data/*.json")
            for path in package.glob(pattern)]
    assert data and "local/notices/*.txt" in (ROOT / "pyproject.toml").read_text()
    for path in [*data, package / "__init__.py"]:
        assert (copy / path.relative_to(ROOT)).is_file(), path
    assert not list(copy.rglob("__pycache__"))
