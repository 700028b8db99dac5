"""Running pytest in a child process on upstream code, and reading what each test did.

Upstream code that must not share this session's interpreter runs in a child pytest: slime's own
plugin-contract tests (they put stand-ins for ray, sglang_router and transformers into
`sys.modules`) and the checks that import SGLang, which pins an older transformers than the
project's (scripts/upstream_overlay.sh). The child writes a JUnit XML report; `outcomes` reads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from tests import upstream

STAND_INS = Path(__file__).resolve().parent / "stand_ins"


@dataclass(frozen=True)
class ChildRun:
    """A child pytest's outcome per test (`module::name` -> passed / failed / skipped) and log."""

    outcomes: dict[str, str]
    log: str

    def named(self, state: str) -> set[str]:
        return {name for name, outcome in self.outcomes.items() if outcome == state}


def overlay_env(extra_paths: list[Path] | None = None) -> dict[str, str]:
    """The environment of a child importing slime, Megatron and SGLang at the pins: the overlay
    first, then the torchvision stand-in, then slime and Megatron (as slime's runtime env orders
    them), then the project; CUDA_DEVICE_MAX_CONNECTIONS=1 as slime's runtime sets it."""
    paths = [upstream.overlay_dir(), STAND_INS, upstream.slime_dir(), upstream.megatron_dir(),
             upstream.ROOT / "src", upstream.ROOT, *(extra_paths or [])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)),
            **upstream.bytecode_env(), "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            upstream.SLIME_PATH_VAR: str(upstream.slime_dir()),
            upstream.MEGATRON_PATH_VAR: str(upstream.megatron_dir())}


def run(args: list[str], cwd: Path, env: dict[str, str], report: Path,
        timeout_s: int = 600) -> ChildRun:
    """`python -m pytest ARGS` in `cwd`; every test's outcome from its JUnit report."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-q",
         f"--junitxml={report}"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    log = (result.stdout + result.stderr)[-8000:]
    assert report.exists(), log
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        failed = case.find("failure") is not None or case.find("error") is not None
        state = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
        outcomes[f"{module}::{case.get('name')}"] = state
    return ChildRun(outcomes, log)
