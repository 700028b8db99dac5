"""The plain GRPO baseline (`pipeline.method: grpo_baseline`) with fakes: G skill-free episodes
per source task, one solver group each, no retrieval, no extraction, the library untouched."""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
from dataclasses import replace

from evolving_rl.core.grid import Grid, baseline_group_id
from evolving_rl.core.rewards import solver_reward
from evolving_rl.core.roles import Role
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.scripted import EXTRACTOR_MARKER, ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import FakeEnvClient, FakeRetrievalClient

TOK = ByteChatTokenizer()
ROWS = 3
GOAL = "take mug 1 from desk 1"


class Mixed:
    """Replies by call count: the goal, an admissible move, or no valid action; records prompts."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.count = itertools.count()

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        action = (GOAL, "go to desk 1", "dance wildly", "go to shelf 1", "go to desk 1", "look",
                  "go to shelf 1")[next(self.count) % 7]
        return f"<reasoning>Go.</reasoning><action>{action}</action>"


def _run(tmp_path, penalty=0.0, **pipeline):
    cfg = small_config(method="grpo_baseline", **pipeline)
    cfg = replace(cfg, rewards=replace(cfg.rewards, invalid_action_penalty=penalty))
    responder, env = Mixed(), FakeEnvClient()
    retrieval = FakeRetrievalClient([f"t{i}" for i in range(6)])
    ctx = fake_context(tmp_path, cfg, policy=ScriptedPolicy(TOK, responder), env=env,
                       retrieval=retrieval)
    outcome = asyncio.run(run_training_rollout(ctx, toy_rows(ROWS), rollout_id=3))
    return ctx, outcome, responder, env, retrieval


def _group_size(ctx) -> int:
    pipeline = ctx.cfg.pipeline
    return Grid(pipeline.n_skills, pipeline.top_k, pipeline.n_repeats).solver_episodes_per_source


def test_plays_g_skill_free_episodes_per_source_without_retrieval_or_extraction(tmp_path):
    ctx, outcome, responder, env, retrieval = _run(tmp_path)
    g = _group_size(ctx)
    assert g == 1 + 3 * 2 * 2  # small_config: N=3, K=2, R=2
    assert len(env.closed) == ROWS * g and not env.open
    assert retrieval.requests == []
    assert not any(EXTRACTOR_MARKER in prompt for prompt in responder.prompts)
    assert ctx.library.load() == []
    assert all(s.role is Role.SOLVER for s in outcome.samples)
    for position in range(ROWS):
        members = [s for s in outcome.samples if s.metadata["source_id"] == f"t{position}"]
        assert sorted(s.metadata["repeat"] for s in members) == list(range(g))
        assert {s.group_id for s in members} == {baseline_group_id(f"{position}:t{position}")}
        assert {s.metadata["task_id"] for s in members} == {f"t{position}"}
    metrics = outcome.metrics
    assert metrics["solver/episodes"] == ROWS * g
    assert metrics["groups/solver/count"] == ROWS and metrics["groups/extractor/count"] == 0
    assert metrics["extractor/samples"] == 0 and metrics["rollout/source_tasks"] == ROWS
    assert metrics["solver/success_rate"] == statistics.fmean(
        float(s.metadata["success"]) for s in outcome.samples)
    assert metrics["solver/reward_mean"] == statistics.fmean(s.reward for s in outcome.samples)


def test_rewards_are_solver_rewards_and_advantages_their_group_z_scores(tmp_path):
    ctx, outcome, *_ = _run(tmp_path, penalty=0.5)
    assert {s.metadata["success"] for s in outcome.samples} == {True, False}
    assert any(s.metadata["n_invalid_actions"] for s in outcome.samples)
    assert outcome.metrics["groups/solver/zero_variance"] == 0
    for sample in outcome.samples:
        meta = sample.metadata
        assert sample.reward == solver_reward(meta["success"],
                                              meta["n_invalid_actions"] / meta["n_steps"], 0.5)
    weight = ctx.cfg.rewards.solver_weight
    for group in {s.group_id for s in outcome.samples}:
        members = [s for s in outcome.samples if s.group_id == group]
        rewards = [s.reward for s in members]
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        for sample in members:
            expected = weight * (sample.reward - mean) / (std + ctx.cfg.rewards.advantage_eps)
            assert math.isclose(sample.advantage, expected, abs_tol=1e-9)


def test_step_index_grouping_leaves_whole_episodes_alone(tmp_path):
    # ALFWorld packs one sample per episode (no step index): the groups stay per source task.
    _, outcome, *_ = _run(tmp_path, solver_grouping="step_index")
    assert {s.group_id for s in outcome.samples} == {
        baseline_group_id(f"{p}:t{p}") for p in range(ROWS)}
