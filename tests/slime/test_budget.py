"""The device-time budget of a one-GPU slime launch (`slime_bridge.budget`) and the learning
profile it shapes (configs/alfworld_1gpu_learn.yaml)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from evolving_rl.config import load_config
from evolving_rl.slime_bridge import budget
from evolving_rl.slime_bridge.budget import MEASURED, Measured, Plan, budget_lines, plan_of

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "alfworld_1gpu_learn.yaml"
LOCAL = ROOT / "configs" / "local_gpu_qwen.yaml"


def test_the_plan_is_the_profiles_episode_budget_per_method():
    config = load_config(PROFILE)
    full, base = plan_of(config, "evolving"), plan_of(config, "grpo_baseline")
    assert (full.episodes, full.extractions, full.samples) == (72, 32, 104)
    assert (base.episodes, base.extractions, base.samples) == (72, 0, 72)
    assert full.steps == base.steps == 8 and full.eval_cases == 16
    assert plan_of(config, steps=3, eval_cases=5) == Plan("evolving", 3, 72, 32, 5)


def test_lines_are_the_measured_numbers_and_their_products():
    plan = Plan("evolving", steps=2, episodes=36, extractions=16, eval_cases=10)
    lines = {line.part: line.seconds for line in budget_lines(MEASURED, plan)}
    assert lines["carry 2.7 GB of wheels and weights"] == pytest.approx(2.7 / (2.6 / 259))
    assert lines["setup"] == 118 and lines["HF -> torch_dist conversion"] == 56
    assert lines["eval before (10 cases)"] == pytest.approx(10 * 162 / 64)
    # rollout: the local step's 48.6 s scaled by 36 of its 72 episodes; train: 52 samples of
    # 2622.7 tokens at slime's 12 x 2622.7 tokens in 6.03 s; push 0.1 s.
    step = 48.6 * 36 / 72 + 52 * 6.03 / 12 + 0.1
    assert lines["2 steps x (rollout + train + weight push)"] == pytest.approx(2 * step)
    assert budget.total_s(budget_lines(MEASURED, plan)) == pytest.approx(sum(lines.values()))


def test_every_method_launch_of_the_profile_fits_30_minutes_with_the_reserve():
    config = load_config(PROFILE)
    for method in budget.METHODS:
        plan = plan_of(config, method)
        total = budget.total_s(budget_lines(MEASURED, plan))
        assert total <= budget.LIMIT_S - budget.RESERVE_S, (method, total)
        assert budget.max_steps(MEASURED, plan, reserve_s=budget.RESERVE_S) >= plan.steps
    # one more step of the full method would not keep the reserve
    longer = plan_of(config, "evolving", steps=9)
    assert budget.total_s(budget_lines(MEASURED, longer)) > budget.LIMIT_S - budget.RESERVE_S


def test_max_steps_is_the_largest_count_that_fits():
    plan = plan_of(load_config(PROFILE), "evolving")
    n = budget.max_steps(MEASURED, plan)
    fits = [budget.total_s(budget_lines(MEASURED, dataclasses.replace(plan, steps=k)))
            <= budget.LIMIT_S for k in (n, n + 1)]
    assert fits == [True, False]
    slow = dataclasses.replace(MEASURED, setup_s=Measured(5000.0, "a slow machine"))
    assert budget.max_steps(slow, plan) == 0


def test_the_profile_header_table_is_what_the_module_prints():
    """The header's totals and step lines come from the arithmetic, not by hand."""
    header = PROFILE.read_text()
    config = load_config(PROFILE)
    for index, method in enumerate(budget.METHODS):
        lines = budget_lines(MEASURED, plan_of(config, method))
        for line in lines:
            row = re.search(rf"\| {re.escape(line.part)} +\|([^|]+)\|([^|]+)\|", header)
            assert row, line.part
            assert int(row.group(index + 1).strip().removesuffix(" s")) == round(line.seconds)
        total = re.search(r"\| total \(of 1800 s\) +\|([^|]+)\|([^|]+)\|", header)
        assert int(total.group(index + 1).strip().removesuffix(" s")) == round(
            budget.total_s(lines))


def test_the_profile_plays_the_local_profiles_games_budget_and_loss():
    """Same games, episode budget, reply formats, sampling, rewards and loss as the local
    profile the local backend learns on; only retrieval's device, steps and eval size differ."""
    slime, local = load_config(PROFILE), load_config(LOCAL)
    assert slime.pipeline == local.pipeline
    assert (slime.sampling, slime.rewards, slime.loss) == (local.sampling, local.rewards,
                                                          local.loss)
    assert slime.alfworld == local.alfworld
    assert dataclasses.replace(slime.retrieval, device="cuda") == local.retrieval
    assert slime.local.n_eval_games == local.local.n_eval_games
    assert (slime.local.model, slime.local.games_per_type) == (local.local.model,
                                                               local.local.games_per_type)


def test_main_prints_the_table_and_fails_a_plan_over_the_limit(capsys):
    assert budget.main(["--config", str(PROFILE)]) == 0
    printed = capsys.readouterr().out
    assert "| 8 steps x (rollout + train + weight push) |" in printed
    assert "evolving 8, grpo_baseline 9" in printed
    assert budget.main(["--config", str(PROFILE), "--steps", "20"]) == 1
