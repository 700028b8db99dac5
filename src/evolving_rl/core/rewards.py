"""Rewards: the extractor's reward from downstream outcomes and the solver's episode reward.

Extractor reward of one skill, decided in this order (status in brackets):
  1. the generation failed (abort, error, overflow)  ->  0.0              [generation_failed]
  2. the skill did not parse or validate             ->  -format_penalty  [unparseable]
  3. the skill failed the language audit             ->  -audit_penalty   [audit_failed]
  4. no downstream score left (see below)            ->  None             [no_downstream]
  5. otherwise the mean of the downstream scores                          [ok]
     or, given the skill's `core.teaching.TeachEvidence` (`pipeline.extractor_reward: teach`),
     what it teaches the no-skill student: `TeachEvidence.value` (None without a scored student)
Downstream scores are floats in [0, 1] (ALFWorld: won 0/1; Mind2Web: fraction of the task's steps
done correctly). A score of None marks a downstream episode that failed for an infrastructure
reason (HTTP error, timeout, environment crash), not because of the model: it is excluded from
the mean. None as a reward means "undefined: drop this sample from its GRPO group".

Owns `RewardSettings`, every reward and advantage setting of a run in one object: the config's
`rewards` section is this type (`config.schema.Config.rewards`), so each of its fields, defaults
and bounds is declared here only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evolving_rl.core.bounds import FieldError, bounded, check_bounds
from evolving_rl.core.grpo import DEFAULT_EPS
from evolving_rl.core.roles import RoleWeights
from evolving_rl.core.strenum import StrEnum
from evolving_rl.core.teaching import TeachEvidence


class ExtractorRewardStatus(StrEnum):
    OK = "ok"
    GENERATION_FAILED = "generation_failed"
    UNPARSEABLE = "unparseable"
    AUDIT_FAILED = "audit_failed"
    NO_DOWNSTREAM = "no_downstream"


@dataclass(frozen=True)
class RewardSettings:
    """Every reward and advantage knob: penalties, GRPO normalisation and role weights (the
    config's `rewards` section).

    Penalties are magnitudes (>= 0); a penalised reward is 0.0 minus the penalty (never -0.0).
    `invalid_action_penalty`: solver reward = success - penalty * (invalid actions / actions),
    0 being the reference's outcome-only reward (`solver_reward`). `solver_weight` and
    `extractor_weight` (λ_s, λ_e: `role_weights`) scale the advantages after normalisation.
    `advantage_eps` and `drop_zero_variance_groups` are `core.grpo.group_advantages`' `eps` and
    `drop_zero_variance`.
    """

    format_penalty: float = bounded(0.1, ge=0.0)
    audit_penalty: float = bounded(0.0, ge=0.0)
    invalid_action_penalty: float = bounded(0.0, ge=0.0)
    extractor_weight: float = bounded(0.2, ge=0.0)
    solver_weight: float = bounded(1.0, ge=0.0)
    advantage_eps: float = bounded(DEFAULT_EPS, gt=0.0)
    drop_zero_variance_groups: bool = False

    def __post_init__(self) -> None:
        check_bounds(self)
        for name in ("format_penalty", "audit_penalty", "invalid_action_penalty",
                     "extractor_weight", "solver_weight", "advantage_eps"):
            if not math.isfinite(getattr(self, name)):
                raise FieldError(name, f"must be finite, got {getattr(self, name)}")

    @property
    def role_weights(self) -> RoleWeights:
        return RoleWeights(solver=self.solver_weight, extractor=self.extractor_weight)


def _check_score(score: float) -> None:
    if not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
        raise ValueError(f"downstream score must be a number in [0, 1], got {score!r}")


@dataclass(frozen=True)
class ExtractorOutcome:
    """What is known about one extracted skill once its downstream episodes are done."""

    parsed: bool
    audit_passed: bool
    downstream_scores: tuple[float | None, ...] = ()
    generation_failed: bool = False

    def __post_init__(self) -> None:
        for score in self.downstream_scores:
            if score is not None:
                _check_score(score)


@dataclass(frozen=True)
class ExtractorReward:
    """`value` None means drop from the group; the counts cover the downstream scores."""

    value: float | None
    status: ExtractorRewardStatus
    n_scored: int
    n_excluded: int


def extractor_reward(outcome: ExtractorOutcome, settings: RewardSettings,
                     teach: TeachEvidence | None = None) -> ExtractorReward:
    """The extractor reward of one skill (rules in the module docstring); with `teach`, rule 5
    is what the skill teaches and the counts are its students'."""
    scores = [score for score in outcome.downstream_scores if score is not None]
    n_scored, n_excluded = len(scores), len(outcome.downstream_scores) - len(scores)
    if teach is not None:
        scores = [] if teach.value is None else [teach.value]
        n_scored, n_excluded = teach.n, 0
    if outcome.generation_failed:
        value, status = 0.0, ExtractorRewardStatus.GENERATION_FAILED
    elif not outcome.parsed:
        value, status = 0.0 - settings.format_penalty, ExtractorRewardStatus.UNPARSEABLE
    elif not outcome.audit_passed:
        value, status = 0.0 - settings.audit_penalty, ExtractorRewardStatus.AUDIT_FAILED
    elif not scores:
        value, status = None, ExtractorRewardStatus.NO_DOWNSTREAM
    elif teach is not None:
        value, status = scores[0], ExtractorRewardStatus.OK
    else:
        value, status = math.fsum(scores) / n_scored, ExtractorRewardStatus.OK
    return ExtractorReward(value, status, n_scored, n_excluded)


def solver_reward(success: bool | None, invalid_fraction: float = 0.0,
                  invalid_action_penalty: float = 0.0) -> float | None:
    """Reward of one solver sample, or None for an infrastructure failure.

    The outcome (1.0 / 0.0) minus `invalid_action_penalty` times the fraction of the episode's
    actions that were not admissible (verl-agent's invalid-action penalty, per episode). ALFWorld:
    `success` is the episode's won flag; Mind2Web: whether the step was correct. With a penalty of
    0 (the reference setting) this is the plain outcome reward.
    """
    if success is None:
        return None
    if not 0.0 <= invalid_fraction <= 1.0:
        raise ValueError(f"invalid_fraction must be in [0, 1], got {invalid_fraction!r}")
    if not math.isfinite(invalid_action_penalty) or invalid_action_penalty < 0:
        raise ValueError(f"invalid_action_penalty must be finite and >= 0, "
                         f"got {invalid_action_penalty!r}")
    value = (1.0 if success else 0.0) - invalid_action_penalty * invalid_fraction
    return value + 0.0  # never -0.0
