"""The distillation term's size next to the GRPO advantages, and the β that equates them
(`core.distill_scale`)."""

import pytest

from evolving_rl.core.distill_scale import calibrated_beta, measure_scale, quantiles
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample


def _sample(role, advantage, old, teacher=None, mask=None):
    mask = mask or [1] * len(old)
    return TrainSample(role=role, prompt_ids=[1], response_ids=list(range(len(old))),
                       loss_mask=mask, log_probs=old, reward=0.0, group_id="g",
                       advantage=advantage, teacher_log_probs=teacher)


def test_beta_makes_the_mean_term_as_large_as_the_mean_solver_advantage():
    samples = [
        _sample(Role.SOLVER, 1.5, [-1.0, -2.0]),                     # an advantage, no teacher
        _sample(Role.SOLVER, -0.5, [-1.0, -1.0, -3.0], [-0.9, -1.2, 0.0], [1, 1, 0]),  # student
        _sample(Role.SOLVER, 0.0, [-2.0], [-2.4]),                    # zero advantage: left out
        _sample(Role.EXTRACTOR, 4.0, [-1.0]),                         # extractor: left out
    ]
    scale = measure_scale(samples, target=2.0)
    assert scale.mean_abs_advantage == pytest.approx(1.0)   # (1.5 + 0.5) / 2
    assert scale.advantage_samples == 2
    # |Δ| over student tokens on the mask: 0.1, 0.2 (masked 3rd left out), 0.4
    assert scale.student_tokens == 3
    assert scale.mean_abs_log_ratio == pytest.approx(0.7 / 3)
    assert scale.beta == pytest.approx(2.0 * 1.0 / (0.7 / 3))


@pytest.mark.parametrize("samples", [
    [_sample(Role.SOLVER, 0.0, [-1.0], [-0.5])],            # no advantage
    [_sample(Role.SOLVER, 1.0, [-1.0])],                    # no student
    [_sample(Role.SOLVER, 1.0, [-1.0], [-1.0])],            # the card changes nothing
    [],
])
def test_a_step_without_evidence_has_no_beta(samples):
    assert measure_scale(samples).beta is None


def test_target_must_be_positive_and_the_median_needs_a_value():
    with pytest.raises(ValueError, match="target"):
        measure_scale([], target=0.0)
    with pytest.raises(ValueError, match="no measured"):
        calibrated_beta([])
    assert calibrated_beta([30.0, 10.0, 200.0]) == 30.0


def test_the_log_ratios_are_summarised_as_a_distribution():
    """Signed quantiles and the share of tokens where teacher and student differ: a mean of
    about 0 from many agreeing tokens and from a few strongly disagreeing ones look alike."""
    old = [-1.0] * 10
    few_strong = [-1.0] * 9 + [-3.0]             # one token 2 nats less likely with the card
    many_small = [-1.2] * 10                     # every token 0.2 nats less likely
    strong = measure_scale([_sample(Role.SOLVER, 1.0, old, few_strong)])
    small = measure_scale([_sample(Role.SOLVER, 1.0, old, many_small)])
    assert strong.mean_abs_log_ratio == pytest.approx(small.mean_abs_log_ratio)  # same mean
    assert strong.share_differs == pytest.approx(0.1) and small.share_differs == 1.0
    assert strong.log_ratio_quantiles == pytest.approx((-2.0, -2.0, 0.0, 0.0, 0.0))
    assert small.log_ratio_quantiles == pytest.approx((-0.2,) * 5)
    assert measure_scale([_sample(Role.SOLVER, 1.0, old)]).log_ratio_quantiles == ()


def test_quantiles_are_nearest_rank():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert quantiles(values, (0.0, 0.2, 0.5, 0.9, 1.0)) == (1.0, 1.0, 3.0, 5.0, 5.0)
