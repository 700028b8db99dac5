"""Tests for evolving_rl.core.rewards and evolving_rl.core.roles."""

import math

import pytest

from evolving_rl.core.rewards import (
    ExtractorOutcome,
    ExtractorRewardStatus,
    RewardSettings,
    extractor_reward,
    solver_reward,
)
from evolving_rl.core.roles import Role, RoleWeights, apply_role_weights

CONFIG = RewardSettings(format_penalty=0.1, audit_penalty=0.05)


def reward(**kwargs):
    fields = {"parsed": True, "audit_passed": True, "downstream_scores": (1.0, 0.0)}
    fields.update(kwargs)
    return extractor_reward(ExtractorOutcome(**fields), CONFIG)


def test_mean_of_downstream_scores():
    result = reward(downstream_scores=(1.0, 0.0, 1.0, 1.0))
    assert result.value == pytest.approx(0.75)
    assert result.status is ExtractorRewardStatus.OK
    assert (result.n_scored, result.n_excluded) == (4, 0)


def test_fractional_scores():
    assert reward(downstream_scores=(0.5, 0.25)).value == pytest.approx(0.375)


def test_bool_scores_accepted():
    assert reward(downstream_scores=(True, False)).value == 0.5


def test_infrastructure_failures_excluded_from_mean():
    result = reward(downstream_scores=(1.0, None, 0.0, None))
    assert result.value == 0.5
    assert (result.n_scored, result.n_excluded) == (2, 2)


def test_all_downstream_excluded_gives_none():
    result = reward(downstream_scores=(None, None))
    assert result.value is None
    assert result.status is ExtractorRewardStatus.NO_DOWNSTREAM
    assert (result.n_scored, result.n_excluded) == (0, 2)


def test_no_downstream_episodes_gives_none():
    result = reward(downstream_scores=())
    assert result.value is None
    assert result.status == "no_downstream"


def test_unparseable_gets_format_penalty():
    result = reward(parsed=False, audit_passed=False, downstream_scores=())
    assert result.value == -0.1
    assert result.status is ExtractorRewardStatus.UNPARSEABLE


def test_unparseable_ignores_scores():
    assert reward(parsed=False, downstream_scores=(1.0, 1.0)).value == -0.1


def test_audit_failed_gets_audit_penalty():
    result = reward(audit_passed=False, downstream_scores=(1.0,))
    assert result.value == -0.05
    assert result.status is ExtractorRewardStatus.AUDIT_FAILED


def test_default_audit_penalty_is_zero():
    result = extractor_reward(
        ExtractorOutcome(parsed=True, audit_passed=False, downstream_scores=(1.0,)),
        RewardSettings(),
    )
    assert result.value == 0.0
    assert math.copysign(1.0, result.value) == 1.0  # not -0.0


def test_generation_failed_is_zero_before_everything_else():
    result = reward(generation_failed=True, parsed=False, downstream_scores=(1.0,))
    assert result.value == 0.0
    assert result.status is ExtractorRewardStatus.GENERATION_FAILED
    assert result.n_scored == 1


def test_zero_penalty_config():
    config = RewardSettings(format_penalty=0.0)
    outcome = ExtractorOutcome(parsed=False, audit_passed=False)
    assert extractor_reward(outcome, config).value == 0.0


@pytest.mark.parametrize("bad", [-0.1, 1.1, math.nan, math.inf, "1", [1.0]])
def test_score_validation(bad):
    with pytest.raises(ValueError):
        ExtractorOutcome(parsed=True, audit_passed=True, downstream_scores=(1.0, bad))


@pytest.mark.parametrize(
    "kwargs", [{"format_penalty": -0.1}, {"audit_penalty": math.nan}, {"format_penalty": math.inf},
               {"invalid_action_penalty": -0.2}, {"advantage_eps": math.inf},
               {"advantage_eps": -1e-6}]
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        RewardSettings(**kwargs)


def test_default_config():
    assert RewardSettings() == RewardSettings(
        format_penalty=0.1, audit_penalty=0.0, invalid_action_penalty=0.0, advantage_eps=1e-6,
        drop_zero_variance_groups=False, solver_weight=1.0, extractor_weight=0.2)
    assert RewardSettings().role_weights == RoleWeights(solver=1.0, extractor=0.2)


def test_mean_is_exact_for_many_scores():
    assert reward(downstream_scores=(0.1,) * 10).value == pytest.approx(0.1, abs=1e-15)


def test_solver_reward():
    assert solver_reward(True) == 1.0
    assert solver_reward(False) == 0.0
    assert solver_reward(None) is None
    assert isinstance(solver_reward(True), float)


def test_solver_reward_invalid_action_penalty():
    assert solver_reward(False, 0.5) == 0.0  # no penalty configured: outcome only
    assert solver_reward(True, 0.25, invalid_action_penalty=0.2) == pytest.approx(0.95)
    assert solver_reward(False, 1.0, invalid_action_penalty=0.2) == pytest.approx(-0.2)
    assert str(solver_reward(False, 0.0, invalid_action_penalty=0.2)) == "0.0"  # not -0.0
    assert solver_reward(None, 1.0, invalid_action_penalty=0.2) is None
    for fraction, penalty in ((-0.1, 0.2), (1.5, 0.2), (0.5, -1.0), (0.5, math.inf)):
        with pytest.raises(ValueError):
            solver_reward(False, fraction, invalid_action_penalty=penalty)


# --- roles -------------------------------------------------------------------------------------


def test_role_weights_applied_by_role():
    weights = RoleWeights(solver=1.0, extractor=0.2)
    out = apply_role_weights(
        [1.0, -2.0, None, 0.5], [Role.SOLVER, Role.EXTRACTOR, Role.EXTRACTOR, "extractor"], weights
    )
    assert out == [1.0, pytest.approx(-0.4), None, pytest.approx(0.1)]


def test_role_weight_lookup():
    assert RoleWeights(solver=1.0, extractor=0.1).of(Role.SOLVER) == 1.0
    assert RoleWeights(solver=1.0, extractor=0.1).of(Role.EXTRACTOR) == 0.1


def test_role_weights_length_mismatch():
    with pytest.raises(ValueError):
        apply_role_weights([1.0], [Role.SOLVER, Role.SOLVER], RewardSettings().role_weights)


def test_unknown_role_rejected():
    with pytest.raises(ValueError):
        apply_role_weights([1.0], ["critic"], RewardSettings().role_weights)


@pytest.mark.parametrize("kwargs", [{"solver": -1.0}, {"extractor": math.nan}])
def test_role_weight_validation(kwargs):
    with pytest.raises(ValueError):
        RoleWeights(**{"solver": 1.0, "extractor": 0.2, **kwargs})
    weights = {f"{role}_weight": value for role, value in kwargs.items()}
    with pytest.raises(ValueError):
        RewardSettings(**weights)


def test_role_values():
    assert str(Role.SOLVER) == "solver"
    assert f"{Role.EXTRACTOR}" == "extractor"
    assert Role("solver") is Role.SOLVER
