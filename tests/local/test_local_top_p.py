"""The local job refuses top-p < 1 for the trained roles before any stage: its decoder samples from
the nucleus, but the log-probs it returns (and the trainer recomputes) are the full distribution's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evolving_rl.config import load_config, parse_config
from evolving_rl.local.job import check_sampling, run_job

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("role", ["solver", "extractor"])
def test_top_p_below_1_is_refused_at_startup(tmp_path, role):
    cfg = parse_config({"environment": "alfworld", "run": {"output_dir": str(tmp_path / "run")},
                        "sampling": {"solver": {"top_p": 1.0}, "extractor": {"top_p": 1.0},
                                     role: {"top_p": 0.9}}})
    with pytest.raises(ValueError, match=f"sampling.{role}.top_p is 0.9"):
        run_job(cfg)
    assert not (tmp_path / "run").exists()  # refused before any stage


def test_the_cpu_default_samples_the_full_distribution():
    check_sampling(load_config(ROOT / "configs/local_cpu.yaml"))
