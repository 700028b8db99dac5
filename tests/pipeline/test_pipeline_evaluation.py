"""The evaluation protocol with fakes: retrieved task -> greedy skill -> test task with and
without it, over repeats; and the persisted-library variant (in both skill formats)."""

from __future__ import annotations

import asyncio
import json

import pytest

from evolving_rl.pipeline.evaluation import run_eval
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.scripted import SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()


@pytest.mark.parametrize("fmt", sorted(SKILLS))
def test_eval_reports_success_with_and_without_the_extracted_skill(tmp_path, fmt):
    policy = ScriptedPolicy(TOK, skill_responder([json.dumps(SKILLS[fmt].good)]))
    ctx = fake_context(tmp_path, small_config(skill_format=fmt), policy=policy)
    metrics = asyncio.run(run_eval(ctx, toy_rows(3), repeats=2))
    assert metrics["eval/all/with_skill_success_mean"] == 1.0
    assert metrics["eval/all/without_skill_success_mean"] == 0.0
    assert metrics["eval/all/with_skill_success_std"] == 0.0
    assert metrics["eval/skill_obtained_rate"] == 1.0 and metrics["eval/cases"] == 6.0
    assert "eval/task_type/type0/with_skill_success_mean" in metrics
    # Greedy sampling is what the protocol asks for.
    assert ctx.cfg.sampling.eval_solver.temperature == 0.0


@pytest.mark.parametrize(("trained", "evaluated"), [("reference", "reference"),
                                                    ("compact", "compact"),
                                                    ("compact", "reference")])
def test_eval_with_a_persisted_library_uses_its_best_skill(tmp_path, trained, evaluated):
    """Records validate back in the format they name, whatever the evaluating config says."""
    skills = SKILLS[trained]
    train = fake_context(tmp_path, small_config(skill_format=trained), policy=ScriptedPolicy(
        TOK, skill_responder([json.dumps(skills.bad), json.dumps(skills.good), "{"])))
    asyncio.run(run_training_rollout(train, toy_rows(2)))
    best = train.library.best_by_source()
    assert best["t0"].skill["name"] == "Take the mug" and best["t0"].skill_format == trained
    # Solver-only policy: any extraction attempt would fail to parse.
    ctx = fake_context(tmp_path, small_config(skill_format=evaluated),
                       policy=ScriptedPolicy(TOK, skill_responder(["nothing"])))
    rows = [row for row in toy_rows(6) if row["id"] in ("t2", "t3")]
    metrics = asyncio.run(run_eval(ctx, rows, library=train.library))
    assert metrics["eval/skill_obtained_rate"] == 1.0
    assert metrics["eval/all/with_skill_success_mean"] == 1.0


def test_a_library_written_before_skill_formats_reads_back_as_compact(tmp_path):
    train = fake_context(tmp_path, small_config(skill_format="compact"), policy=ScriptedPolicy(
        TOK, skill_responder([json.dumps(SKILLS["compact"].good)])))
    asyncio.run(run_training_rollout(train, toy_rows(2)))
    rows = [json.loads(line) for line in train.library.path.read_text().splitlines()]
    legacy = [{key: value for key, value in row.items() if key != "skill_format"} for row in rows]
    train.library.path.write_text("".join(json.dumps(row) + "\n" for row in legacy))
    records = train.library.load()
    assert len(records) == len(rows) and {r.skill_format for r in records} == {"compact"}
