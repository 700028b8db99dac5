"""The four-stage rollout with fakes: groups, advantages, role weights, the extractor reward as
the mean of its skill's downstream scores, exclusion, statuses, the skill library and the metrics
(skill-dependent tests run in both skill formats)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import statistics

import pytest

from evolving_rl.config import parse_config
from evolving_rl.core.grid import extractor_group_id, solver_group_id
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows, turn_sampling
from tests.fakes.scripted import SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import FakeRetrievalClient

TOK = ByteChatTokenizer()
FORMATS = pytest.mark.parametrize("fmt", sorted(SKILLS))


def _rollout(ctx, n_rows=2):
    return asyncio.run(run_training_rollout(ctx, toy_rows(n_rows), rollout_id=7))


def _normalised(values):
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return [(v - mean) / (std + 1e-6) for v in values]


@FORMATS
@pytest.mark.parametrize("mode", ["as_written", "skip"])
def test_groups_advantages_and_role_weights(tmp_path, fmt, mode):
    outputs = [json.dumps(SKILLS[fmt].good), json.dumps(SKILLS[fmt].bad), "{not json"]
    ctx = fake_context(tmp_path, small_config(skill_format=fmt, unusable_skills=mode),
                       policy=ScriptedPolicy(TOK, skill_responder(outputs)))
    outcome = _rollout(ctx)
    cfg = ctx.cfg.pipeline  # N=3, K=2, R=2
    # The reference plays the unparseable skill too (as written); "skip" plays the 2 usable ones.
    played = [0, 1, 2] if mode == "as_written" else [0, 1]
    solver = [s for s in outcome.samples if s.role is Role.SOLVER]
    extractor = [s for s in outcome.samples if s.role is Role.EXTRACTOR]
    assert len(extractor) == 2 * cfg.n_skills
    assert len(solver) == 2 * len(played) * cfg.top_k * cfg.n_repeats
    for position in range(2):
        key = f"{position}:t{position}"
        group = [s for s in extractor if s.group_id == extractor_group_id(key)]
        rewards = [s.reward for s in sorted(group, key=lambda s: s.metadata["skill_index"])]
        assert rewards == [1.0, 0.0, -ctx.cfg.rewards.format_penalty]
        expected = [0.2 * a for a in _normalised(rewards)]
        got = [s.advantage for s in sorted(group, key=lambda s: s.metadata["skill_index"])]
        assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(got, expected, strict=True))
        for k in range(cfg.top_k):
            members = [s for s in solver if s.group_id == solver_group_id(key, k)]
            assert sorted(s.metadata["skill_index"] for s in members) == sorted(
                played * cfg.n_repeats)
            # the solver wins with the good skill (index 0) only
            assert [s.reward for s in members] == [
                float(s.metadata["skill_index"] == 0) for s in members]
            expected = _normalised([s.reward for s in members])
            assert all(math.isclose(s.advantage, e, abs_tol=1e-9)
                       for s, e in zip(members, expected, strict=True))
    assert outcome.metrics["extractor/parse/invalid_json"] == 2.0
    assert outcome.metrics["groups/zero_variance"] == 0.0
    assert outcome.metrics["groups/extractor/count"] == 2.0  # one per source task
    assert outcome.metrics["groups/solver/count"] == 2.0 * cfg.top_k
    assert all(s.response_length > 0 for s in outcome.samples)


def test_source_task_is_excluded_from_retrieval_unless_asked(tmp_path):
    retrieval = FakeRetrievalClient([f"t{i}" for i in range(6)])
    ctx = fake_context(tmp_path, retrieval=retrieval)
    outcome = _rollout(ctx)
    queries, k = retrieval.requests[0]
    assert [q.exclude_ids for q in queries] == [("t0",), ("t1",)] and k == ctx.cfg.pipeline.top_k
    assert outcome.metrics["retrieval/source_retrieved"] == 0.0
    assert all(s.metadata["task_id"] != s.metadata["source_id"]
               for s in outcome.samples if s.role is Role.SOLVER)
    included = fake_context(tmp_path, small_config(include_source_in_retrieval=True))
    assert _rollout(included).metrics["retrieval/source_retrieved"] == 2.0


@FORMATS
def test_non_english_and_invalid_skills_get_statuses_and_the_library_records_them(tmp_path, fmt):
    outputs = [json.dumps(SKILLS[fmt].good), json.dumps(SKILLS[fmt].chinese), "no json at all"]
    ctx = fake_context(tmp_path, small_config(skill_format=fmt),
                       policy=ScriptedPolicy(TOK, skill_responder(outputs)))
    outcome = _rollout(ctx, n_rows=1)
    assert outcome.metrics["extractor/audit_failures"] == 1.0
    assert outcome.metrics["extractor/audit/non_english"] == 1.0
    assert outcome.metrics["extractor/reward_status/unparseable"] == 1.0
    records = ctx.library.load()
    assert [(r.parse_ok, r.audit_ok, r.reward_status) for r in records] == [
        (True, True, "ok"), (True, False, "audit_failed"), (False, False, "unparseable")]
    assert records[0].source_id == "t0" and records[0].rollout == "7"
    assert len(records[0].downstream_scores) == ctx.cfg.pipeline.top_k * ctx.cfg.pipeline.n_repeats
    assert records[0].reward == 1.0 and records[0].skill["name"] == "Take the mug"
    assert {r.skill_format for r in records} == {fmt}
    parsed = [s.metadata["skill_parsed"] for s in outcome.samples if s.role is Role.EXTRACTOR]
    assert parsed == [True, True, False]


def test_failed_samples_leave_their_groups_and_are_never_emitted(tmp_path):
    calls = itertools.count()
    good, bad = json.dumps(SKILLS["reference"].good), json.dumps(SKILLS["reference"].bad)
    base = skill_responder([good, bad, good])

    class Flaky(ScriptedPolicy):
        async def generate(self, prompt_ids, sampling):
            from evolving_rl.clients.policy import PolicyError

            if next(calls) % 5 == 3:
                raise PolicyError("flaky")
            return await super().generate(prompt_ids, sampling)

    ctx = fake_context(tmp_path, policy=Flaky(TOK, base))
    outcome = _rollout(ctx, n_rows=3)
    assert outcome.metrics["samples/dropped"] > 0 or outcome.metrics.get(
        "solver/status/policy_error", 0) > 0
    assert all(s.status.trainable and s.reward is not None for s in outcome.samples)
    assert all(s.response_length > 0 for s in outcome.samples)


def test_retrieval_failure_gives_no_downstream_and_drops_extractors(tmp_path):
    ctx = fake_context(tmp_path, retrieval=FakeRetrievalClient([], fail=True))
    outcome = _rollout(ctx)
    assert outcome.metrics["retrieval/failed"] == 1.0
    assert outcome.samples == []
    assert outcome.metrics["extractor/reward_status/no_downstream"] == 2 * 3


def test_source_episode_is_trained_only_when_asked(tmp_path):
    plain = _rollout(fake_context(tmp_path))
    assert not any(s.metadata.get("source_episode") for s in plain.samples)
    ctx = fake_context(tmp_path, small_config(train_on_source_episode=True))
    outcome = _rollout(ctx)
    sources = [s for s in outcome.samples if s.metadata.get("source_episode")]
    assert len(sources) == 2 and all(s.group_id == "solver-source" for s in sources)
    for role, extra in (("solver", 1.0), ("extractor", 0.0)):  # the source group is a solver one
        key = f"groups/{role}/count"
        assert outcome.metrics[key] == plain.metrics[key] + extra


def test_metrics_cover_roles_statuses_groups_and_timings(tmp_path):
    outcome = _rollout(fake_context(tmp_path))
    metrics = outcome.metrics
    for key in ("solver/reward_mean", "extractor/reward_mean", "solver/success_rate",
                "source/success_rate", "groups/zero_variance", "extractor/audit_failures",
                "timing/wall_s", "timing/policy_wait_covered_s", "timing/env_wait_covered_s",
                "timing/retrieval_wait_covered_s", "timing/overhead_fraction",
                "timing/downstream_overlap", "solver/episodes"):
        assert key in metrics, key
    assert any(key.startswith("task_type/") for key in metrics)
    assert any(key.startswith("solver/status/") for key in metrics)
    assert all(isinstance(v, float) for v in metrics.values())
    assert all(s.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)
               for s in outcome.samples)


def _first_turn_invalid(prompt: str) -> str:
    """Wins at once with a good skill; otherwise one inadmissible action, then wanders."""
    if "Skill: Take the mug" in prompt:
        return "<action>take mug 1 from desk 1</action>"
    first_turn = prompt.rsplit("Step ", 1)[-1].startswith("0.")
    return "<action>fly away</action>" if first_turn else "<action>go to shelf 1</action>"


def test_invalid_action_penalty_shapes_the_solver_reward(tmp_path):
    cfg = parse_config({"pipeline": {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_steps": 4,
                                     "max_context_tokens": 16384},
                        "sampling": turn_sampling(200),
                        "rewards": {"invalid_action_penalty": 0.5}})
    skills = SKILLS["reference"]
    policy = ScriptedPolicy(TOK, skill_responder([json.dumps(skills.good), json.dumps(skills.bad)],
                                                 solver=_first_turn_invalid))
    outcome = _rollout(fake_context(tmp_path, cfg, policy=policy))
    solver = [s for s in outcome.samples if s.role is Role.SOLVER]
    assert {(s.metadata["success"], s.metadata["n_invalid_actions"], s.metadata["n_steps"])
            for s in solver} == {(True, 0, 1), (False, 1, 4)}
    for sample in solver:
        assert sample.reward == (1.0 if sample.metadata["success"] else -0.5 * 1 / 4)
    # extractor rewards stay the mean downstream success: the penalty is the solver's alone
    extractor = {s.metadata["skill_index"]: s.reward for s in outcome.samples
                 if s.role is Role.EXTRACTOR}
    assert extractor == {0: 1.0, 1: 0.0}


def _wins_in_mug_3(prompt: str) -> str:
    """Wins with a good skill in the task "put mug 3" only; wanders everywhere else."""
    won = "Skill: Take the mug" in prompt and "put mug 3 on the desk" in prompt
    return f"<action>{'take mug 1 from desk 1' if won else 'go to shelf 1'}</action>"


def test_the_extractor_reward_is_the_mean_of_its_downstream_scores(tmp_path):
    """The good skill wins 1 of its 4 downstream episodes (t1..t4, won in t3 only): reward 0.25.
    Fails with `extractor_reward`'s mean (`core.rewards`) replaced by the max or the sum (1.0),
    the first score or the last (0.0), or with `assembly` crediting a skill with the downstream
    scores of the next one (`grid.skill_episodes(extraction.index + 1 mod N)`)."""
    cfg = small_config(n_skills=2, top_k=4, n_repeats=1, max_steps=1, skill_format="compact")
    skills = SKILLS["compact"]
    policy = ScriptedPolicy(TOK, skill_responder([json.dumps(skills.good), json.dumps(skills.bad)],
                                                 solver=_wins_in_mug_3))
    ctx = fake_context(tmp_path, cfg, policy=policy)
    outcome = _rollout(ctx, n_rows=1)
    extractor = {s.metadata["skill_index"]: s.reward for s in outcome.samples
                 if s.role is Role.EXTRACTOR}
    assert extractor == {0: 0.25, 1: 0.0}
    good = ctx.library.load()[0]
    assert good.downstream_ids == ["t1", "t2", "t3", "t4"]
    assert good.downstream_scores == [0.0, 0.0, 1.0, 0.0] and good.reward == 0.25
