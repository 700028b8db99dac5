"""Tests for evolving_rl.core.grpo: group normalisation with explicit ids."""

import math
import statistics

import pytest

from evolving_rl.core.grpo import DEFAULT_EPS, group_advantages


def test_single_group_population_std():
    rewards = [1.0, 0.0, 1.0, 0.0]
    result = group_advantages(["g"] * 4, rewards, eps=0.0)
    assert result.advantages == (1.0, -1.0, 1.0, -1.0)
    assert result.keep == (True,) * 4
    assert result.zero_variance_groups == ()
    (stats,) = result.groups
    assert (stats.group_id, stats.size, stats.n_failed) == ("g", 4, 0)
    assert stats.mean == 0.5
    assert stats.std == 0.5 == statistics.pstdev(rewards)


def test_matches_formula_with_eps():
    rewards = [0.2, 0.9, 0.4]
    result = group_advantages([7, 7, 7], rewards, eps=0.01)
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    for advantage, reward in zip(result.advantages, rewards, strict=True):
        assert advantage == pytest.approx((reward - mean) / (std + 0.01), rel=1e-12)


def test_default_eps_used():
    result = group_advantages(["a", "a"], [0.0, 1.0])
    assert result.advantages[1] == pytest.approx(0.5 / (0.5 + DEFAULT_EPS), rel=1e-12)
    assert result.advantages[1] < 1.0


def test_advantages_sum_to_zero_per_group():
    ids = ["a", "b", "a", "b", "a"]
    result = group_advantages(ids, [0.1, 5.0, 0.7, 2.0, 0.3])
    for group in ("a", "b"):
        members = [adv for gid, adv in zip(ids, result.advantages, strict=True) if gid == group]
        assert math.fsum(members) == pytest.approx(0.0, abs=1e-12)


def test_non_contiguous_mixed_group_ids():
    ids = ["x", 3, "x", ("s", 1), 3, ("s", 1)]
    rewards = [1.0, 0.0, 0.0, 0.25, 1.0, 0.75]
    result = group_advantages(ids, rewards, eps=0.0)
    assert result.advantages == (1.0, -1.0, -1.0, -1.0, 1.0, 1.0)
    assert [stats.group_id for stats in result.groups] == ["x", 3, ("s", 1)]


def test_all_equal_rewards_zero_variance():
    result = group_advantages(["g"] * 3, [0.3, 0.3, 0.3])
    assert result.advantages == (0.0, 0.0, 0.0)
    assert result.zero_variance_groups == ("g",)
    assert result.keep == (True, True, True)
    assert result.groups[0].std == pytest.approx(0.0, abs=1e-15)


def test_zero_variance_not_fooled_by_float_rounding():
    result = group_advantages(["g"] * 3, [0.1, 0.1, 0.1], eps=0.0)
    assert result.advantages == (0.0, 0.0, 0.0)
    assert result.zero_variance_groups == ("g",)


def test_group_of_size_one():
    result = group_advantages(["solo", "pair", "pair"], [0.9, 0.0, 1.0])
    assert result.advantages[0] == 0.0
    assert result.zero_variance_groups == ("solo",)
    assert result.groups[0].size == 1
    assert result.groups[0].std == 0.0


def test_drop_zero_variance_keep_mask():
    ids = ["flat", "flat", "live", "live"]
    result = group_advantages(ids, [1.0, 1.0, 0.0, 1.0], drop_zero_variance=True)
    assert result.keep == (False, False, True, True)
    assert result.advantages[:2] == (0.0, 0.0)


def test_none_rewards_excluded_before_normalisation():
    result = group_advantages(["g"] * 4, [1.0, None, 0.0, None], eps=0.0)
    assert result.advantages == (1.0, None, -1.0, None)
    assert result.keep == (True, False, True, False)
    stats = result.groups[0]
    assert (stats.size, stats.n_failed, stats.mean, stats.std) == (2, 2, 0.5, 0.5)


def test_none_leaving_one_scored_entry_is_zero_variance():
    result = group_advantages(["g", "g"], [None, 0.4])
    assert result.advantages == (None, 0.0)
    assert result.zero_variance_groups == ("g",)


def test_all_none_group_is_empty_not_zero_variance():
    result = group_advantages(["dead", "dead", "live", "live"], [None, None, 0.0, 1.0])
    assert result.advantages[:2] == (None, None)
    assert result.keep[:2] == (False, False)
    assert result.zero_variance_groups == ()
    dead = result.groups[0]
    assert (dead.size, dead.n_failed, dead.mean, dead.std) == (0, 2, None, None)
    assert result.zero_variance_fraction == 0.0


def test_zero_variance_fraction_counts_non_empty_groups():
    result = group_advantages(["a", "b", "b", "c"], [1.0, 0.0, 1.0, None])
    assert result.zero_variance_groups == ("a",)
    assert result.zero_variance_fraction == 0.5


def test_empty_input():
    result = group_advantages([], [])
    assert result.advantages == () and result.keep == () and result.groups == ()
    assert result.zero_variance_fraction == 0.0


def test_bool_and_int_rewards():
    result = group_advantages(["g"] * 2, [True, 0], eps=0.0)
    assert result.advantages == (1.0, -1.0)


def test_length_mismatch():
    with pytest.raises(ValueError):
        group_advantages(["a"], [1.0, 2.0])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_rejected(bad):
    with pytest.raises(ValueError):
        group_advantages(["a", "a"], [1.0, bad])


@pytest.mark.parametrize("eps", [-1e-6, math.nan, math.inf])
def test_bad_eps_rejected(eps):
    with pytest.raises(ValueError):
        group_advantages(["a"], [1.0], eps=eps)


def test_eps_zero_with_tiny_spread_is_safe():
    result = group_advantages(["g", "g"], [1e-200, 2e-200], eps=0.0)
    assert all(math.isfinite(adv) for adv in result.advantages)


def test_large_eps_shrinks_advantages():
    small = group_advantages(["g"] * 2, [0.0, 1.0], eps=1e-8).advantages
    large = group_advantages(["g"] * 2, [0.0, 1.0], eps=1.0).advantages
    assert large[1] == pytest.approx(0.5 / 1.5)
    assert abs(large[1]) < abs(small[1])


def test_result_is_frozen():
    result = group_advantages(["g"], [1.0])
    with pytest.raises(AttributeError):
        result.keep = ()
