"""The local job refuses top-p < 1 for the trained roles before any stage: its decoder samples from
the nucleus, but the log-probs it returns (and the trainer recomputes) are the full distribution's.
The refusal is a `ConfigError` naming the key; the command line exits 2 with its message.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from evolving_rl.config import ConfigError, load_config, parse_config
from evolving_rl.local.__main__ import main
from evolving_rl.local.job import check_sampling, run_job

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("role", ["solver", "extractor"])
def test_top_p_below_1_is_refused_at_startup(tmp_path, role):
    cfg = parse_config({"environment": "alfworld", "run": {"output_dir": str(tmp_path / "run")},
                        "sampling": {"solver": {"top_p": 1.0}, "extractor": {"top_p": 1.0},
                                     role: {"top_p": 0.9}}})
    with pytest.raises(ConfigError, match=f"'sampling.{role}.top_p': is 0.9") as err:
        run_job(cfg)
    assert err.value.key == f"sampling.{role}.top_p"
    assert not (tmp_path / "run").exists()  # refused before any stage


def test_the_command_line_exits_2_with_the_message(tmp_path, caplog):
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.ERROR):
        code = main(["--config", str(ROOT / "configs/local_cpu.yaml"),
                     "--set", f"run.output_dir={run_dir}", "--set", "sampling.solver.top_p=0.9"])
    assert code == 2
    assert "config key 'sampling.solver.top_p': is 0.9" in caplog.text
    assert "set --set sampling.solver.top_p=1.0" in caplog.text
    assert not run_dir.exists()


def test_the_cpu_default_samples_the_full_distribution():
    check_sampling(load_config(ROOT / "configs/local_cpu.yaml"))
