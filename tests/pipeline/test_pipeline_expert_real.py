"""Expert trajectories against the real ALFWorld router + workers (and the real retrieval server):
each task type's planner walkthrough, read by the adapter from a generated game file and replayed
through the env server, wins; its turns hold the walkthrough's commands, the real observations
and admissible lists, and the reply in each answer format. The hand-written cards name every
command verb the planner needs for their type. The expert_skill protocol end to end: the
extractor prompt holds the retrieved task's walkthrough and the true success flag."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from evolving_rl.domains.alfworld_written_skills import load_written_skills
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.pipeline.evaluation import EvalPlan, EvalProtocol, evaluate_cases
from evolving_rl.pipeline.expert import replay_expert
from evolving_rl.pipeline.timing import IOClock
from tests.fakes.scripted import EXTRACTOR_MARKER, SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()
VERBS = ("go to", "open", "close", "take", "move", "heat", "cool", "clean", "use", "examine")


def _with(cfg, **alfworld):
    return dataclasses.replace(cfg, alfworld=dataclasses.replace(cfg.alfworld, **alfworld))


def _rows(cfg, split: str) -> list[dict]:
    """The first row of `split` per task type."""
    rows: dict[str, dict] = {}
    for line in (Path(cfg.alfworld.prepared_dir) / f"{split}.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["metadata"]["task_type"], row)
    return list(rows.values())


def _walkthrough(cfg, game: str) -> list[str]:
    return json.loads((Path(cfg.alfworld.data_root) / game).read_text())["walkthrough"]


async def _in_context(cfg, policy, work):
    ctx = await build_context(cfg, policy, TOK, adapter=make_adapter(cfg, lenient=True))
    try:
        return await work(ctx)
    finally:
        await ctx.close()


@pytest.mark.parametrize("action_format", ["verbatim", "number"])
def test_each_types_walkthrough_wins_through_the_real_env_server(real_servers, contract_config,
                                                                 action_format):
    cfg = _with(contract_config, action_format=action_format)
    rows = _rows(cfg, "train")
    assert len(rows) == 6

    async def work(ctx):
        tasks = [ctx.adapter.task_from_row(row) for row in rows]
        return [await replay_expert(ctx, IOClock(), ctx.adapter, task,
                                    ctx.adapter.expert_commands(task)) for task in tasks]

    replays = asyncio.run(_in_context(cfg, ScriptedPolicy(TOK), work))
    for row, replay in zip(rows, replays, strict=True):
        walkthrough = _walkthrough(cfg, row["metadata"]["game"])
        assert replay is not None and replay.success, row["id"]
        assert [turn.action for turn in replay.turns] == walkthrough
        assert all(turn.action_status == "ok" for turn in replay.turns)
        assert all(turn.action in turn.actions for turn in replay.turns)
        assert f"Your task is to: {row['question']}" in replay.turns[0].observation
        assert all(turn.observation.strip() for turn in replay.turns)
        for turn in replay.turns:
            written = (turn.actions.index(turn.action) + 1 if action_format == "number"
                       else turn.action)
            assert turn.model_text == f"<action>{written}</action>"


def test_the_written_cards_name_every_verb_the_planner_uses(alfworld_data):
    cards = load_written_skills()
    for path in sorted((alfworld_data / "json_2.1.1").glob("*/*/*/game.tw-pddl")):
        task_type = json.loads((path.parent / "traj_data.json").read_text())["task_type"]
        for command in json.loads(path.read_text())["walkthrough"]:
            verb = next(v for v in VERBS if command.startswith(f"{v} "))
            assert verb in cards[task_type], (task_type, command)


def test_expert_skill_protocol_against_the_real_servers(real_servers, contract_config):
    cfg = contract_config
    assert cfg.pipeline.skill_format == "reference"
    extractor: list[str] = []
    respond = skill_responder([json.dumps(SKILLS["reference"].good)],
                              solver=lambda prompt: "<action>look</action>")

    def responder(prompt: str) -> str:
        if EXTRACTOR_MARKER in prompt:
            extractor.append(prompt)
        return respond(prompt)

    rows = _rows(cfg, "valid_unseen")[:2]
    plan = EvalPlan(protocol=EvalProtocol.EXPERT_SKILL, split="valid_unseen",
                    retrieval_split="train")

    async def work(ctx):
        records, failed = await evaluate_cases(ctx, rows, 1, plan)
        return records, failed, {r.retrieved_id: ctx.catalog.get(r.retrieved_id) for r in records}

    records, failed, retrieved = asyncio.run(_in_context(cfg, ScriptedPolicy(TOK, responder),
                                                         work))
    assert not failed and len(records) == len(extractor) == 2
    for record in records:
        assert record.skill_obtained and record.skill_note is None
        assert record.with_skill is not None and record.with_skill.scored
        assert record.without_skill.scored and record.retrieved_id != record.task_id
        task = retrieved[record.retrieved_id]
        prompt = next(p for p in extractor if task.question in p)
        assert all(command in prompt for command in _walkthrough(cfg, task.metadata["game"]))
        assert "True Environment Success: True" in prompt  # the reference extractor prompt
