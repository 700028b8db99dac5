"""The device-time budget of a one-GPU slime launch (`slime_bridge.budget`) and the learning
profile it shapes (configs/alfworld_1gpu_learn.yaml, launched by the recipe's `learn`)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from evolving_rl.config import load_config
from evolving_rl.slime_bridge import budget
from evolving_rl.slime_bridge.budget import MEASURED, Measured, Plan, budget_lines, plan_of
from evolving_rl.slime_bridge.recipe import PROFILES

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "alfworld_1gpu_learn.yaml"
LOCAL = ROOT / "configs" / "local_gpu_qwen.yaml"
LEARN = PROFILES["learn"]


def _plan(method: str, **sizes) -> Plan:
    return plan_of(load_config(PROFILE), LEARN, method, **sizes)


def test_the_plan_is_the_recipes_launch_and_the_profiles_episode_budget():
    full, base = _plan("evolving"), _plan("grpo_baseline")
    assert (full.episodes, full.extractions, full.samples) == (72, 32, 104)
    assert (base.episodes, base.extractions, base.samples) == (72, 0, 72)
    assert full.steps == base.steps == 8 and full.eval_interval == 4 and full.evals_after == 2
    assert full.eval_cases == 48
    assert _plan("evolving", steps=3, eval_cases=5) == Plan("evolving", 3, 4, 72, 32, 5)
    assert budget.recipe_profile(PROFILE) is LEARN


def test_a_profile_that_saves_checkpoints_or_launches_nothing_is_refused():
    with pytest.raises(ValueError, match="saves checkpoints"):
        budget.recipe_profile(ROOT / PROFILES["alfworld"].config)
    with pytest.raises(ValueError, match="no recipe profile"):
        budget.recipe_profile(LOCAL)


def test_lines_are_the_measured_numbers_and_their_products():
    plan = Plan("evolving", steps=5, eval_interval=2, episodes=36, extractions=16, eval_cases=10)
    lines = {line.part: line.seconds for line in budget_lines(MEASURED, plan)}
    assert lines["one failed machine start"] == 90 and lines["setup"] == 52
    assert lines["carry 3.3 GB of wheels and weights"] == 211
    assert lines["eval before training (10 cases; the first: cold)"] == pytest.approx(
        147 - 24 + 10 * 24 / 48)
    assert lines["2 evals after every 2 steps (10 cases each)"] == pytest.approx(2 * 10 * 24 / 48)
    # the evolving launch's measured rollout 12.67 s and train 12.51 s of 104 samples, scaled to 52
    step = (12.67 + 12.51) * 52 / 104 + 0.16
    assert lines["5 steps x (rollout + train + weight push)"] == pytest.approx(5 * step)
    assert lines["first step's warm-up"] == pytest.approx(25.07 - 12.51)
    assert not any("conversion" in part or "checkpoint" in part for part in lines)
    assert budget.total_s(budget_lines(MEASURED, plan)) == pytest.approx(sum(lines.values()))


def _launch_s(method: str) -> float:
    """The budget of one launch from its start to its exit (no start, carry, setup, polling)."""
    return budget.total_s([line for line in budget_lines(MEASURED, _plan(method))
                           if line.part not in ("one failed machine start", "setup",
                                                "polling between device calls")
                           and not line.part.startswith("carry")])


def test_the_budget_of_the_measured_evolving_launch_errs_long_by_under_a_tenth():
    """The evolving launch of docs/results/2026-12-07-slime-learn-arms.md, a bare machine's
    first, took 693 s from its start to its exit: its budget is no shorter, not 10% longer."""
    assert 693 <= _launch_s("evolving") <= 693 * 1.1


def test_the_budget_of_the_warmer_baseline_launch_errs_long():
    """The grpo_baseline launch of the same report ran second on that machine (218 s to SGLang
    ready and a 24 s first evaluation, against 291 s and 147 s on the bare machine), 424 s in
    all; with the bare machine's start and first evaluation it would be ~620 s, and the budget,
    which assumes a bare machine, is no shorter than either (657 s)."""
    assert 424 + (291 - 218) + (147 - 24) <= _launch_s("grpo_baseline") <= 424 * 1.6


def test_every_method_launch_of_the_profile_fits_30_minutes_with_the_reserve():
    for method in budget.METHODS:
        plan = _plan(method)
        total = budget.total_s(budget_lines(MEASURED, plan))
        assert total <= budget.LIMIT_S - budget.RESERVE_S, (method, total)
        assert budget.max_steps(MEASURED, plan, reserve_s=budget.RESERVE_S) >= plan.steps
    # each method's step is its own measured one, with its source
    for method in budget.METHODS:
        step = {line.part: line for line in budget_lines(MEASURED, _plan(method))}
        basis = step["8 steps x (rollout + train + weight push)"].basis
        assert basis.startswith("rollout") and f"{budget.ARMS_STEPS}: {method}'s" in basis, basis


def test_max_steps_is_the_largest_count_that_fits():
    plan = _plan("evolving")
    n = budget.max_steps(MEASURED, plan)
    fits = [budget.total_s(budget_lines(MEASURED, dataclasses.replace(plan, steps=k)))
            <= budget.LIMIT_S for k in (n, n + 1)]
    assert fits == [True, False]
    slow = dataclasses.replace(MEASURED, setup_s=Measured(5000.0, "a slow machine"))
    assert budget.max_steps(slow, plan) == 0


def test_the_profile_header_table_is_what_the_module_prints():
    """The header's totals and lines come from the arithmetic, not by hand."""
    header = PROFILE.read_text()
    for index, method in enumerate(budget.METHODS):
        lines = budget_lines(MEASURED, _plan(method))
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
    assert (slime.local.model, slime.local.games_per_type) == (local.local.model,
                                                               local.local.games_per_type)
    # the local compare runs the slime launch's steps and held-out games: all of valid_unseen
    assert slime.local.train_steps == int(LEARN.env["NUM_ROLLOUT"])
    assert LEARN.env["EVAL_SPLITS"] == "valid_unseen" and slime.local.eval_repeats == 1
    types = len(slime.alfworld.generator_task_types)
    assert slime.local.n_eval_games == slime.local.games_per_type * types == 48


def test_main_prints_the_table_and_fails_a_plan_over_the_limit(capsys):
    assert budget.main(["--config", str(PROFILE)]) == 0
    printed = capsys.readouterr().out
    assert "| 8 steps x (rollout + train + weight push) |" in printed
    assert "evolving 27, grpo_baseline 36" in printed
    assert budget.main(["--config", str(PROFILE), "--steps", "40"]) == 1
