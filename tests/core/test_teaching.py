"""The teacher switch's pure math: the mean teacher, the log-ratio, what a skill teaches, and the
extractor reward that uses it (docs/design.md §4.6)."""

from __future__ import annotations

import math

import pytest

from evolving_rl.core.rewards import (
    ExtractorOutcome,
    ExtractorRewardStatus,
    RewardSettings,
    extractor_reward,
)
from evolving_rl.core.teaching import TeachEvidence, mean_log_ratio, mean_teacher


def test_mean_teacher_is_the_per_token_mean():
    assert mean_teacher([[-1.0, -2.0, 0.0], [-3.0, -1.0, 0.0]]) == [-2.0, -1.5, 0.0]
    with pytest.raises(ValueError):
        mean_teacher([])
    with pytest.raises(ValueError):
        mean_teacher([[-1.0], [-1.0, -2.0]])


def test_mean_teacher_is_unnormalised_where_the_skills_disagree():
    """Scored over a whole vocabulary, the mean teacher's probabilities sum to 1 only when the
    skills agree: four skills each putting 0.7 on another of 4 tokens keep 0.65 (docs/design.md
    §4.6), so teacher - old reads 0.43 nats above the log-ratio to the product of experts."""
    vocab = range(4)
    disagreeing = [[math.log(0.7 if v == i else 0.1) for v in vocab] for i in range(4)]
    mass = math.fsum(math.exp(t) for t in mean_teacher(disagreeing))
    assert mass == pytest.approx(0.6506, abs=1e-4) and -math.log(mass) == pytest.approx(
        0.4298, abs=1e-4)
    agreeing = [disagreeing[0]] * 4
    assert math.fsum(math.exp(t) for t in mean_teacher(agreeing)) == pytest.approx(1.0)


def test_mean_log_ratio_reads_only_the_mask():
    assert mean_log_ratio([-1.0, 0.0, -0.5], [-2.0, 0.0, -1.5], [1, 0, 1]) == 1.0
    assert mean_log_ratio([0.0], [0.0], [0]) is None
    with pytest.raises(ValueError):
        mean_log_ratio([-1.0], [-1.0, -2.0], [1])


def test_teach_value_is_the_covariance_of_return_and_log_ratio():
    # returns 1, 0, 0, 1 (mean 0.5); the skill raises the won episodes, lowers the lost ones
    evidence = TeachEvidence((1.0, 0.0, 0.0, 1.0), (0.4, -0.2, 0.0, 0.2))
    assert evidence.value == pytest.approx((0.5 * 0.4 + 0.5 * 0.2 + 0.5 * 0.2 + 0.0) / 4)
    # the same skill with the signs of its log-ratios flipped teaches the opposite
    flipped = TeachEvidence(evidence.returns, tuple(-d for d in evidence.log_ratios))
    assert flipped.value == pytest.approx(-evidence.value)
    # a constant shift of every log-ratio (a skill that raises everything alike) teaches nothing
    shifted = TeachEvidence(evidence.returns, tuple(d + 3.0 for d in evidence.log_ratios))
    assert shifted.value == pytest.approx(evidence.value)


def test_teach_value_without_evidence():
    assert TeachEvidence((), ()).value is None
    assert TeachEvidence((0.0, 0.0), (0.3, -0.7)).value == 0.0
    with pytest.raises(ValueError):
        TeachEvidence((1.0,), ())


def test_extractor_reward_with_teach_evidence():
    settings = RewardSettings(format_penalty=0.1, audit_penalty=0.05)
    good = ExtractorOutcome(parsed=True, audit_passed=True, downstream_scores=(1.0, 1.0))
    evidence = TeachEvidence((1.0, 0.0), (0.5, -0.5))
    reward = extractor_reward(good, settings, evidence)
    assert reward.status is ExtractorRewardStatus.OK and reward.value == pytest.approx(0.25)
    assert reward.n_scored == 2
    # the downstream rules before rule 5 are unchanged
    bad = ExtractorOutcome(parsed=False, audit_passed=False)
    assert extractor_reward(bad, settings, evidence).value == pytest.approx(-0.1)
    audit = ExtractorOutcome(parsed=True, audit_passed=False)
    assert extractor_reward(audit, settings, evidence).value == pytest.approx(-0.05)
    failed = ExtractorOutcome(parsed=True, audit_passed=True, generation_failed=True)
    assert extractor_reward(failed, settings, evidence).status is \
        ExtractorRewardStatus.GENERATION_FAILED
    # no scored student: no evidence, the sample leaves its group
    none = extractor_reward(good, settings, TeachEvidence((), ()))
    assert none.value is None and none.status is ExtractorRewardStatus.NO_DOWNSTREAM
    # without evidence: the reference's mean downstream score
    assert extractor_reward(good, settings).value == 1.0
