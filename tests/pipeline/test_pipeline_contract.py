"""Contract tests: the pipeline against the real ALFWorld and retrieval servers and a fake
SGLang HTTP server (`tests/fakes/sglang_server.py`) that returns token ids and log-probs.

Checks token/mask/log-prob alignment, group ids and advantages (recomputed with the core), role
weights, exclusion of the source task, statuses for bad model output (no action tag, invalid
skill JSON, non-English skill, context overflow) and an env server dying mid-rollout. The
skill-dependent checks run in both skill formats (`pipeline.skill_format`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from env.launch import free_port, free_port_block
from evolving_rl.config import load_config
from evolving_rl.core.grid import extractor_group_id, solver_group_id
from evolving_rl.core.grpo import group_advantages
from evolving_rl.core.roles import Role
from evolving_rl.domains.alfworld import SKILL_INTRO
from evolving_rl.pipeline.context import build_context
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import with_turn_tokens
from tests.fakes.contract import run_contract_rollout, with_pipeline
from tests.fakes.scripted import (
    GOOD_SKILL,
    SKILLS,
    ActsAtCall,
    reply_text,
    skill_responder,
    token_log_prob,
)
from tests.fakes.sglang_server import FakeSGLang
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import FakeEnvClient
from tests.servers import alfworld_servers

ROLLOUT_TIMEOUT_S = 240
FORMATS = pytest.mark.parametrize("fmt", sorted(SKILLS))


def _train_lines(cfg) -> list[str]:
    return (Path(cfg.alfworld.prepared_dir) / "train.jsonl").read_text().splitlines()


def _rows(cfg, n: int = 2) -> list[dict]:
    """The first train task of each of the first `n` task types."""
    rows, seen = [], set()
    for line in _train_lines(cfg):
        row = json.loads(line)
        if row["metadata"]["task_type"] not in seen:
            seen.add(row["metadata"]["task_type"])
            rows.append(row)
    return rows[:n]


def _run(cfg, responder, rows=None, policy_wrapper=None):
    return run_contract_rollout(cfg, responder, rows or _rows(cfg), policy_wrapper,
                                ROLLOUT_TIMEOUT_S)


def test_real_retrieval_excludes_the_source_task(retrieval_server, contract_config):
    """Real retrieval + fake SGLang over HTTP, toy env in memory (runs without the env server)."""
    rows = _rows(contract_config, 3)

    async def main():
        fake = FakeSGLang(responder=skill_responder([json.dumps(GOOD_SKILL)], reply_text))
        url = await fake.start(free_port())
        ctx = await build_context(contract_config, policy_url=url, tokenizer=ByteChatTokenizer())
        await ctx.env.close()
        ctx.env = FakeEnvClient()
        try:
            return await run_training_rollout(ctx, rows)
        finally:
            await ctx.close()
            await fake.stop()

    outcome = asyncio.run(main())
    assert outcome.metrics["retrieval/failed"] == 0.0
    assert outcome.metrics["retrieval/source_retrieved"] == 0.0
    downstream = {(s.metadata["source_id"], s.metadata["task_id"])
                  for s in outcome.samples if s.role is Role.SOLVER}
    assert downstream and all(source != task for source, task in downstream)
    train_ids = {json.loads(line)["id"] for line in _train_lines(contract_config)}
    assert {task for _, task in downstream} <= train_ids


@FORMATS
def test_samples_are_aligned_grouped_weighted_and_never_from_the_source(real_servers,
                                                                        contract_config, fmt):
    cfg = with_pipeline(contract_config, skill_format=fmt)
    good = SKILLS[fmt].good
    outputs = [json.dumps(good), json.dumps({**good, "name": "Other"})]
    outcome, fake, ctx = _run(cfg, skill_responder(outputs, solver=reply_text))
    assert outcome.samples
    assert outcome.metrics["extractor/parse_ok_rate"] == 1.0
    assert {(r.skill_format, r.usable) for r in ctx.library.load()} == {(fmt, True)}
    assert outcome.metrics.get("solver/status/env_error", 0.0) == 0.0
    # The scripted solver copies an action from the prompt's admissible list, so every action it
    # sends is admissible only if the real server's list reached the prompt.
    for stage in ("source", "solver"):
        assert outcome.metrics.get(f"{stage}/action/not_admissible", 0.0) == 0.0
        assert outcome.metrics.get(f"{stage}/action/no_action_tag", 0.0) == 0.0
    assert outcome.metrics["source/invalid_action_fraction"] == 0.0
    for sample in outcome.samples:
        assert len(sample.loss_mask) == len(sample.log_probs) == sample.response_length > 0
        for token, mask, log_prob in zip(sample.response_ids, sample.loss_mask,
                                         sample.log_probs, strict=True):
            assert log_prob == (token_log_prob(token) if mask else 0.0)
        assert sample.tokens[: len(sample.prompt_ids)] == sample.prompt_ids
    for body in fake.requests:
        assert body["return_logprob"] is True
        max_new = body["sampling_params"]["max_new_tokens"]
        assert len(body["input_ids"]) + max_new <= cfg.pipeline.max_context_tokens
    keys = {f"{i}:{row['id']}" for i, row in enumerate(_rows(cfg))}
    allowed = {extractor_group_id(k) for k in keys} | {
        solver_group_id(k, t) for k in keys for t in range(cfg.pipeline.top_k)}
    assert {s.group_id for s in outcome.samples} <= allowed
    expected = group_advantages([s.group_id for s in outcome.samples],
                                [s.reward for s in outcome.samples],
                                eps=cfg.rewards.advantage_eps)
    for sample, advantage in zip(outcome.samples, expected.advantages, strict=True):
        weight = (cfg.rewards.extractor_weight if sample.role is Role.EXTRACTOR
                  else cfg.rewards.solver_weight)
        assert abs(sample.advantage - weight * advantage) < 1e-9
    solver = [s for s in outcome.samples if s.role is Role.SOLVER]
    assert solver and all(s.metadata["task_id"] != s.metadata["source_id"] for s in solver)
    assert outcome.metrics["retrieval/source_retrieved"] == 0.0


def test_no_action_tag_is_sent_as_is_and_counted(real_servers, contract_config):
    def solver(prompt: str) -> str:
        return "I think I should look around the room first."

    outcome, _, _ = _run(contract_config, skill_responder([json.dumps(GOOD_SKILL)], solver))
    metrics = outcome.metrics
    assert metrics["source/action/no_action_tag"] == 2 * contract_config.pipeline.max_steps
    assert metrics["source/status/truncated"] == 2.0  # the game answered every raw reply
    assert "source/status/env_error" not in metrics


@FORMATS
@pytest.mark.parametrize("mode", ["as_written", "skip"])
def test_invalid_and_non_english_skills_get_their_statuses(real_servers, contract_config, fmt,
                                                          mode):
    not_json = "{'name': 'not json'"
    outputs = [not_json, json.dumps(SKILLS[fmt].chinese)]
    system_prompts: list[str] = []

    def solver(prompt: str) -> str:
        system_prompts.append(prompt.split("Your task is to:")[0])
        return reply_text(prompt)

    cfg = with_pipeline(contract_config, skill_format=fmt, unusable_skills=mode)
    outcome, _, ctx = _run(cfg, skill_responder(outputs, solver=solver))
    metrics = outcome.metrics
    assert metrics["extractor/reward_status/unparseable"] == 2.0
    assert metrics["extractor/reward_status/audit_failed"] == 2.0
    assert metrics["extractor/audit/non_english"] == 2.0
    with_skill = [p for p in system_prompts if SKILL_INTRO in p]
    if mode == "skip":  # no usable skill: nothing to play downstream
        assert metrics["solver/episodes"] == 0.0 and not with_skill
    else:  # the reference plays every cell: the unparsed skill as written, the other as its card
        grid = cfg.pipeline
        assert metrics["solver/episodes"] == 2 * grid.n_skills * grid.top_k * grid.n_repeats
        assert any(not_json in p for p in with_skill)
        assert any("# Skill: 找到杯子" in p for p in with_skill)
    rewards = sorted(s.reward for s in outcome.samples if s.role is Role.EXTRACTOR)
    assert rewards == [-contract_config.rewards.format_penalty] * 2 + [0.0] * 2
    records = ctx.library.load()
    assert {(r.parse_reason.split(":")[0], r.audit_rule) for r in records} == {
        ("invalid_json", None), ("ok", "non_english")}


def test_context_overflow_statuses(real_servers, contract_config):
    rambling = skill_responder([json.dumps(GOOD_SKILL)], solver=lambda _: "x" * 5000)
    cfg = with_turn_tokens(with_pipeline(contract_config, max_context_tokens=1800), 300)
    outcome, _, _ = _run(cfg, rambling)
    assert outcome.metrics["source/status/truncated"] == 2.0
    assert all(s.metadata["stop_reason"] == "context_limit" and s.response_length > 0
               and len(s.tokens) <= 1800 for s in outcome.samples if s.role is Role.SOLVER)
    tiny = with_turn_tokens(with_pipeline(contract_config, max_context_tokens=200), 100)
    outcome, _, _ = _run(tiny, rambling)
    assert outcome.metrics["source/status/context_overflow"] == 2.0
    assert outcome.samples == []


def test_env_server_dying_mid_rollout_is_a_status_not_a_hang(real_servers, tmp_path):
    data = yaml.safe_load(Path(real_servers).read_text())
    a, n = data["alfworld"], data["alfworld"]["n_workers"]
    taken = {*range(a["port"], a["port"] + 1), data["retrieval"]["port"],
             *range(a["worker_base_port"], a["worker_base_port"] + n)}
    port = free_port_block(1 + n, exclude=taken)
    data["alfworld"].update(port=port, worker_base_port=port + 1,
                            log_dir=str(tmp_path / "logs"))
    config = tmp_path / "dying.yaml"
    config.write_text(yaml.safe_dump(data))
    cfg = load_config(config)
    alfworld_servers("start", config)

    try:
        outcome, _, _ = _run(cfg, skill_responder([json.dumps(GOOD_SKILL)], reply_text),
                             policy_wrapper=lambda inner: ActsAtCall(
                                 inner, 6, lambda: alfworld_servers("stop", config)))
    finally:
        alfworld_servers("stop", config)
    errors = sum(v for k, v in outcome.metrics.items() if k.endswith("/status/env_error"))
    assert errors >= 1
    assert all(s.status.trainable for s in outcome.samples)
