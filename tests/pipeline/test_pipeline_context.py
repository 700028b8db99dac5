"""The context takes the core's settings from the config: every `rewards` key reaches them."""

from dataclasses import fields

from evolving_rl.config import parse_config
from evolving_rl.core.rewards import RewardSettings
from evolving_rl.core.roles import RoleWeights
from tests.fakes.context import fake_context

REWARDS = {"format_penalty": 0.3, "audit_penalty": 0.25, "invalid_action_penalty": 0.2,
           "extractor_weight": 0.5, "solver_weight": 0.7, "advantage_eps": 0.01,
           "drop_zero_variance_groups": True}


def test_reward_settings_carry_every_rewards_key():
    cfg = parse_config({"rewards": REWARDS})
    assert {f.name for f in fields(cfg.rewards)} == set(REWARDS)
    assert cfg.rewards == RewardSettings(**REWARDS)
    assert cfg.rewards.role_weights == RoleWeights(solver=0.7, extractor=0.5)


def test_context_derives_its_settings_from_the_config(tmp_path):
    cfg = parse_config({"rewards": REWARDS, "audit": {"enabled": False}})
    ctx = fake_context(tmp_path, cfg)
    assert ctx.rewards == RewardSettings(**REWARDS)
    assert ctx.audit is None
    enabled = fake_context(tmp_path, parse_config({"audit": {"max_char_run": 5}}))
    assert enabled.audit is not None and enabled.audit.max_char_run == 5
