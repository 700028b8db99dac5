"""Runs the checks that import SGLang (tests/slime_upstream/overlay/check_*.py) in a child pytest
with SGLang's overlay first on the path (tests/slime_upstream/child_pytest.py says why); each
check module must run whole and pass. End to end (real servers, Ray, Megatron): not in the quick
tier (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import upstream
from tests.slime_upstream import child_pytest

OVERLAY_CHECKS = Path(__file__).resolve().parent / "overlay"
pytestmark = pytest.mark.end_to_end
# at least this many tests per module (a module that collects nothing fails)
MODULES = {"check_launch_args.py": 10, "check_loss.py": 6, "check_megatron_spec.py": 6,
           "check_rollout_manager.py": 4, "check_web_one_gpu.py": 5}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_overlay_checks_pass(module, tmp_path):
    env = child_pytest.overlay_env()
    run = child_pytest.run([str(OVERLAY_CHECKS / module), "-o", "addopts=--timeout=600",
                            f"--confcutdir={OVERLAY_CHECKS}", f"--basetemp={tmp_path / 'tmp'}"],
                           cwd=upstream.ROOT, env=env, report=tmp_path / "report.xml")
    assert len(run.outcomes) >= MODULES[module], run.log
    assert run.named("failed") == set() and run.named("skipped") == set(), run.log
