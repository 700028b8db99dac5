"""The teacher switch in the rollout (docs/design.md §4.6): no-skill students per retrieved
task, scored with every usable card, in their task's solver group with the mean teacher; the
`teach` extractor reward; the reference rollout untouched when the switch is off."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from evolving_rl.config import parse_config
from evolving_rl.config.loader import ConfigError
from evolving_rl.core.grid import solver_group_id
from evolving_rl.core.roles import Role
from evolving_rl.core.teaching import TeachEvidence
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.scripted import SKILLS, ScriptedPolicy, skill_responder, token_log_prob
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()
OUTPUTS = [json.dumps(SKILLS["reference"].good), json.dumps(SKILLS["reference"].bad), "{not json"]


def _rollout(ctx, n_rows=2):
    return asyncio.run(run_training_rollout(ctx, toy_rows(n_rows), rollout_id=3))


def _students(outcome):
    return [s for s in outcome.samples if s.metadata.get("student")]


def test_students_are_scored_with_every_skill_the_solver_reads(tmp_path):
    policy = ScriptedPolicy(TOK, skill_responder(OUTPUTS))
    ctx = fake_context(tmp_path, small_config(skill_use="teacher"), policy=policy)
    outcome = _rollout(ctx)
    cfg = ctx.cfg.pipeline  # N=3 (two cards, one skill played as written), K=2, R=2
    students = _students(outcome)
    assert len(students) == 2 * cfg.top_k * cfg.n_repeats
    assert policy.score_calls == len(students) * 3
    for sample in students:
        assert sample.role is Role.SOLVER and sample.metadata["teacher_skills"] == [0, 1, 2]
        # two cards hold "Skill" (+0.05), the text as written does not (+0): the mean teacher
        expected = [(token_log_prob(t) + 0.1 / 3) if m else 0.0
                    for t, m in zip(sample.response_ids, sample.loss_mask, strict=True)]
        assert sample.teacher_log_probs == pytest.approx(expected)
    for position in range(2):
        for rank in range(cfg.top_k):
            group = solver_group_id(f"{position}:t{position}", rank)
            members = [s for s in outcome.samples if s.group_id == group]
            assert sum(bool(s.metadata.get("student")) for s in members) == cfg.n_repeats
            assert len(members) == 3 * cfg.n_repeats + cfg.n_repeats
    metrics = outcome.metrics
    assert metrics["teacher/students"] == len(students)
    assert metrics["teacher/score_calls"] == 3 * len(students)
    assert metrics["teacher/score_failures"] == 0.0
    assert metrics["teacher/mean_log_ratio"] == pytest.approx(0.1 / 3)
    skill_samples = [s for s in outcome.samples
                     if s.role is Role.SOLVER and not s.metadata.get("student")]
    assert all(s.teacher_log_probs is None for s in skill_samples)


def test_context_plays_no_student_and_scores_nothing(tmp_path):
    policy = ScriptedPolicy(TOK, skill_responder(OUTPUTS))
    outcome = _rollout(fake_context(tmp_path, small_config(), policy=policy))
    assert policy.score_calls == 0 and not _students(outcome)
    assert all(s.teacher_log_probs is None for s in outcome.samples)
    assert not any(name.startswith("teacher/") for name in outcome.metrics)


def test_skip_scores_only_the_usable_cards(tmp_path):
    policy = ScriptedPolicy(TOK, skill_responder(OUTPUTS))
    cfg = small_config(skill_use="teacher", unusable_skills="skip")
    outcome = _rollout(fake_context(tmp_path, cfg, policy=policy), n_rows=1)
    assert all(s.metadata["teacher_skills"] == [0, 1] for s in _students(outcome))


def _wins_on_even_tasks(prompt: str) -> str:
    """Without a skill: the winning command on tasks whose mug number is even."""
    mug = re.search(r"mug (\d)", prompt)
    action = "take mug 1 from desk 1" if mug and int(mug.group(1)) % 2 == 0 else "go to shelf 1"
    return f"<reasoning>ok</reasoning><action>{action}</action>"


def _teacher(context: str, continuation: str) -> float:
    """The "Take the mug" card makes the winning command likelier and the others less likely;
    the other card changes nothing."""
    if "Take the mug" not in context:
        return 0.0
    return 0.2 if "<action>take mug 1" in continuation else -0.1


def test_teach_reward_is_what_the_card_teaches_the_students(tmp_path):
    policy = ScriptedPolicy(TOK, skill_responder(OUTPUTS, solver=_wins_on_even_tasks),
                            teacher=_teacher)
    cfg = small_config(skill_use="teacher", extractor_reward="teach")
    outcome = _rollout(fake_context(tmp_path, cfg, policy=policy), n_rows=1)
    students = _students(outcome)
    wins = [s.metadata["success"] for s in students]
    assert 0 < sum(wins) < len(wins)  # the retrieved tasks mix even and odd mugs
    ratios = [0.2 if won else -0.1 for won in wins]
    expected = TeachEvidence(tuple(float(w) for w in wins), tuple(ratios)).value
    rewards = {s.metadata["skill_index"]: s.reward for s in outcome.samples
               if s.role is Role.EXTRACTOR}
    assert rewards[0] == pytest.approx(expected) and expected > 0
    assert rewards[1] == 0.0  # teaches nothing
    assert rewards[2] == pytest.approx(-cfg.rewards.format_penalty)


def test_the_switch_is_checked_at_load():
    with pytest.raises(ConfigError, match="extractor_reward"):
        parse_config({"pipeline": {"extractor_reward": "teach"}})
    with pytest.raises(ConfigError, match="skill_use"):
        parse_config({"pipeline": {"skill_use": "teacher", "method": "grpo_baseline"}})


def test_teacher_is_refused_where_every_step_is_prompted_afresh():
    from evolving_rl.pipeline.context import build_context

    cfg = parse_config({"environment": "mind2web", "pipeline": {"skill_use": "teacher"}})
    with pytest.raises(ConfigError, match="dialogue history"):
        asyncio.run(build_context(cfg, policy=ScriptedPolicy(TOK), tokenizer=TOK))
    cold = parse_config({"pipeline": {"skill_use": "teacher"},
                         "sampling": {"solver": {"temperature": 0.7}}})
    with pytest.raises(ConfigError, match="temperature"):
        asyncio.run(build_context(cold, policy=ScriptedPolicy(TOK), tokenizer=TOK))


def _walkthroughs(root, games: dict[str, list[str] | None]) -> None:
    """A game file per toy game holding only its walkthrough (None: a game without one)."""
    for game, walkthrough in games.items():
        (root / game).mkdir(parents=True)
        (root / game / "game.tw-pddl").write_text(json.dumps({"walkthrough": walkthrough}))


def _expert_config(tmp_path, **pipeline):
    return parse_config({"pipeline": {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_steps": 4,
                                      "max_context_tokens": 16384,
                                      "skill_use": "teacher", "teacher_skill": "expert",
                                      **pipeline},
                         "alfworld": {"data_root": str(tmp_path / "games")}})


def test_expert_cards_teach_each_student_its_own_tasks_card(tmp_path):
    win = ["go to desk 1", "take mug 1 from desk 1"]  # the toy game is won by the second
    _walkthroughs(tmp_path / "games", {f"game{i}": win for i in range(1, 6)} | {"game0": None})
    # the good skill for the expert's trajectories, a bad one for the model's own attempts
    cards = json.dumps(SKILLS["reference"].good)
    policy = ScriptedPolicy(TOK, skill_responder([cards]))
    ctx = fake_context(tmp_path, _expert_config(tmp_path, skill_format="reference"),
                       policy=policy)
    outcome = asyncio.run(run_training_rollout(ctx, toy_rows(3), rollout_id=1))
    students = _students(outcome)
    assert len(students) == 3 * 2  # 3 sources x K=2 retrieved tasks x R=1
    taught = [s for s in students if s.teacher_log_probs is not None]
    untaught = [s for s in students if s.teacher_log_probs is None]
    # t0 has no walkthrough: its students (if retrieved) are scored with nothing
    assert untaught and all(s.metadata["task_id"] == "t0" for s in untaught)
    assert taught and all(s.metadata["teacher_skills"] == [-1] for s in taught)
    assert policy.score_calls == len(taught)  # one card each, not the N candidates
    for sample in taught:  # the good card holds "Skill" (+0.05): the teacher is that card's
        expected = [(token_log_prob(t) + 0.05) if m else 0.0
                    for t, m in zip(sample.response_ids, sample.loss_mask, strict=True)]
        assert sample.teacher_log_probs == pytest.approx(expected)
    assert outcome.metrics["teacher/students_scored"] == len(taught)


def test_expert_cards_are_checked_at_load():
    with pytest.raises(ConfigError, match="teacher_skill"):
        parse_config({"pipeline": {"teacher_skill": "expert"}})
    with pytest.raises(ConfigError, match="teacher_skill"):
        parse_config({"pipeline": {"skill_use": "teacher", "teacher_skill": "expert",
                                   "extractor_reward": "teach"}})
