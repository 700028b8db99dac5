"""The evaluation protocol with fakes: retrieved task -> greedy skill -> test task with and
without it, over repeats; and the persisted-library variant."""

from __future__ import annotations

import asyncio
import json

from evolving_rl.pipeline.evaluation import run_eval
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, toy_rows
from tests.fakes.scripted import BAD_SKILL as BAD
from tests.fakes.scripted import GOOD_SKILL as GOOD
from tests.fakes.scripted import ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()


def test_eval_reports_success_with_and_without_the_extracted_skill(tmp_path):
    policy = ScriptedPolicy(TOK, skill_responder([json.dumps(GOOD)]))
    ctx = fake_context(tmp_path, policy=policy)
    metrics = asyncio.run(run_eval(ctx, toy_rows(3), repeats=2))
    assert metrics["eval/all/with_skill_success_mean"] == 1.0
    assert metrics["eval/all/without_skill_success_mean"] == 0.0
    assert metrics["eval/all/with_skill_success_std"] == 0.0
    assert metrics["eval/skill_obtained_rate"] == 1.0 and metrics["eval/cases"] == 6.0
    assert "eval/task_type/type0/with_skill_success_mean" in metrics
    # Greedy sampling is what the protocol asks for.
    assert ctx.cfg.sampling.eval_solver.temperature == 0.0


def test_eval_with_a_persisted_library_uses_its_best_skill(tmp_path):
    train = fake_context(tmp_path, policy=ScriptedPolicy(
        TOK, skill_responder([json.dumps(BAD), json.dumps(GOOD), "{"])))
    asyncio.run(run_training_rollout(train, toy_rows(2)))
    best = train.library.best_by_source()
    assert best["t0"].skill["name"] == "Take the mug"
    # Solver-only policy: any extraction attempt would fail to parse.
    ctx = fake_context(tmp_path, policy=ScriptedPolicy(TOK, skill_responder(["nothing"])))
    rows = [row for row in toy_rows(6) if row["id"] in ("t2", "t3")]
    metrics = asyncio.run(run_eval(ctx, rows, library=train.library))
    assert metrics["eval/skill_obtained_rate"] == 1.0
    assert metrics["eval/all/with_skill_success_mean"] == 1.0
