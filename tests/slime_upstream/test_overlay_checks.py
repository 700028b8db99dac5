"""Runs the checks that import SGLang (tests/slime_upstream/overlay/check_*.py) in a child pytest
with SGLang's overlay first on the path (tests/slime_upstream/child_pytest.py says why); each
check module must run whole and pass. One child runs every module, once per run
(tests/run_wide.py): importing SGLang, Megatron-LM and slime is ~8 s of each child's CPU, and a
child per module paid it five times. End to end (real servers, Ray, Megatron): not in the quick
tier (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import run_wide, upstream
from tests.slime_upstream import child_pytest

OVERLAY_CHECKS = Path(__file__).resolve().parent / "overlay"
pytestmark = pytest.mark.end_to_end
# at least this many tests per module (a module that collects nothing fails)
MODULES = {"check_launch_args.py": 10, "check_loss.py": 6, "check_megatron_spec.py": 6,
           "check_rollout_manager.py": 4, "check_web_one_gpu.py": 5}


def _run_every_module(folder: Path) -> dict:
    run = child_pytest.run([*(str(OVERLAY_CHECKS / module) for module in sorted(MODULES)),
                            "-o", "addopts=--timeout=600", f"--confcutdir={OVERLAY_CHECKS}",
                            f"--basetemp={folder / 'tmp'}"],
                           cwd=upstream.ROOT, env=child_pytest.overlay_env(),
                           report=folder / "report.xml")
    return {"outcomes": run.outcomes, "log": run.log}


@pytest.fixture  # read back per test (tests/run_wide.py): a failure is reported once
def overlay_run(tmp_path_factory) -> child_pytest.ChildRun:
    made = run_wide.once(tmp_path_factory, "overlay_checks", _run_every_module)
    return child_pytest.ChildRun(made["outcomes"], made["log"])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_overlay_checks_pass(module, overlay_run):
    outcomes = {name: state for name, state in overlay_run.outcomes.items()
                if name.split("::")[0] == module.removesuffix(".py")}
    run = child_pytest.ChildRun(outcomes, overlay_run.log)
    assert len(run.outcomes) >= MODULES[module], run.log
    assert run.named("failed") == set() and run.named("skipped") == set(), run.log
