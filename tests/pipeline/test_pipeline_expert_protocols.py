"""The expert_skill and written_skill protocols with fakes (toy env, scripted policy, in-memory
retrieval): the expert walkthrough of the retrieved task (read from its game file) is replayed
through the env client and reaches the extractor prompt with the replay's success flag; a
hand-written card of the test task's type reaches the solver prompt; missing experts and cards
are counted and reported beside the other protocols; both are resumable; an environment
without the capability fails at startup."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from evolving_rl.clients.http import TransportError
from evolving_rl.config import parse_config
from evolving_rl.domains.alfworld_written_skills import load_written_skills
from evolving_rl.evaluate.report import write_report
from evolving_rl.evaluate.runner import EvalRequest, run_evaluation
from evolving_rl.pipeline.context import make_adapter
from evolving_rl.pipeline.eval_records import CaseStore
from evolving_rl.pipeline.evaluation import (
    NOTE_NO_WRITTEN_SKILL,
    NOTE_SOURCE_FAILED,
    EvalPlan,
    EvalProtocol,
    UnsupportedProtocolError,
    check_supported,
    evaluate_cases,
    run_eval,
)
from evolving_rl.pipeline.expert import (
    NOTE_EXPERT_FAILED,
    NOTE_EXPERT_NOT_WON,
    NOTE_NO_EXPERT,
    replay_expert,
)
from evolving_rl.pipeline.timing import IOClock
from tests.fakes.checkpoint import checkpoint_spec
from tests.fakes.context import fake_context, toy_rows, turn_sampling
from tests.fakes.scripted import EXTRACTOR_MARKER, SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import ACTIONS, FakeEnvClient

TOK = ByteChatTokenizer()
WIN = ["go to desk 1", "take mug 1 from desk 1"]  # the toy game is won by the second
SIZES = {"n_skills": 2, "top_k": 1, "max_steps": 3,
         "max_context_tokens": 16384, "skill_format": "reference"}
EXPERT = EvalPlan(protocol=EvalProtocol.EXPERT_SKILL, split="valid_unseen")
WRITTEN = EvalPlan(protocol=EvalProtocol.WRITTEN_SKILL, split="valid_unseen")
REFERENCE = EvalPlan(protocol=EvalProtocol.REFERENCE, split="valid_unseen")


class Recorder:
    """A scripted policy's responder that keeps every prompt it answers (the good skill when
    asked to extract; the toy game's winning command only with that skill's card)."""

    def __init__(self) -> None:
        self.extractor: list[str] = []
        self.solver: list[str] = []
        self._respond = skill_responder([json.dumps(SKILLS["reference"].good)])

    def __call__(self, prompt: str) -> str:
        (self.extractor if EXTRACTOR_MARKER in prompt else self.solver).append(prompt)
        return self._respond(prompt)


def _games(root: Path, walkthroughs: dict[str, list[str] | None]) -> None:
    """A game file per toy game name holding only its walkthrough."""
    for game, walkthrough in walkthroughs.items():
        (root / game).mkdir(parents=True)
        (root / game / "game.tw-pddl").write_text(json.dumps({"walkthrough": walkthrough}))


def _context(tmp_path: Path, recorder: Recorder, **alfworld):
    cfg = parse_config({"pipeline": SIZES, "sampling": turn_sampling(200),
                        "alfworld": {"data_root": str(tmp_path / "games"), **alfworld}})
    return fake_context(tmp_path, cfg, policy=ScriptedPolicy(TOK, recorder))


def test_expert_skill_extracts_from_the_replayed_walkthrough(tmp_path):
    # t0 retrieves t1 (no walkthrough), t1 retrieves t0 (the winning one)
    _games(tmp_path / "games", {"game0": WIN, "game1": None})
    recorder = Recorder()
    ctx = _context(tmp_path, recorder)
    records, failed = asyncio.run(evaluate_cases(ctx, toy_rows(2), 1, EXPERT))
    by_id = {r.task_id: r for r in records}
    assert not failed and set(by_id) == {"t0", "t1"}
    assert by_id["t1"].retrieved_id == "t0" and by_id["t1"].skill_obtained
    assert by_id["t1"].skill_note is None and by_id["t1"].with_skill.success
    assert not by_id["t1"].without_skill.success
    assert by_id["t0"].skill_note == NOTE_NO_EXPERT and by_id["t0"].with_skill is None
    (prompt,) = recorder.extractor  # one extraction: from t0's expert trajectory only
    assert "put mug 0 on the desk." in prompt and "True Environment Success: True" in prompt
    assert all(f"<action>{command}</action>" in prompt for command in WIN)
    assert "You take the mug 1." not in prompt  # the last observation is not a turn's
    assert WIN[0] in ctx.env.actions  # sent by the replay only (the solver never goes there)
    assert not ctx.env.open  # every episode, the replay's included, was closed
    metrics = asyncio.run(run_eval(ctx, toy_rows(2), plan=EXPERT))
    assert metrics[f"eval/note/{NOTE_NO_EXPERT}"] == 1.0
    assert metrics["eval/skill_obtained_rate"] == 0.5


def test_a_replay_that_does_not_win_is_extracted_as_failed(tmp_path):
    _games(tmp_path / "games", {"game0": WIN[:1], "game1": WIN[:1]})
    recorder = Recorder()
    ctx = _context(tmp_path, recorder)
    metrics = asyncio.run(run_eval(ctx, toy_rows(2), plan=EXPERT))
    assert metrics[f"eval/note/{NOTE_EXPERT_NOT_WON}"] == 2.0
    assert metrics["eval/skill_obtained_rate"] == 1.0
    assert all("True Environment Success: False" in p for p in recorder.extractor)


def test_the_number_format_replay_writes_the_listed_number(tmp_path):
    _games(tmp_path / "games", {"game0": [*WIN[:1], "dance", WIN[1]]})
    ctx = _context(tmp_path, Recorder(), action_format="number")
    task = ctx.catalog.get("t0")
    replay = asyncio.run(replay_expert(ctx, IOClock(), ctx.adapter, task,
                                       ctx.adapter.expert_commands(task)))
    assert replay is not None and replay.success
    assert [t.model_text for t in replay.turns] == [
        f"<action>{ACTIONS.index(WIN[0]) + 1}</action>", "<action>dance</action>",
        f"<action>{ACTIONS.index(WIN[1]) + 1}</action>"]
    assert [t.action for t in replay.turns] == [WIN[0], "dance", WIN[1]]
    assert [t.action_status for t in replay.turns] == ["ok", "not_admissible", "ok"]
    assert all(t.actions == tuple(ACTIONS) for t in replay.turns)
    assert replay.turns[1].observation == "You arrive somewhere."


def _typed_rows(types: list[str]) -> list[dict]:
    return [{**row, "metadata": {**row["metadata"], "task_type": task_type}}
            for row, task_type in zip(toy_rows(len(types)), types, strict=True)]


def test_written_skill_card_of_the_test_type_reaches_the_solver(tmp_path):
    recorder = Recorder()
    ctx = _context(tmp_path, recorder)
    cards = load_written_skills()
    rows = _typed_rows(["pick_heat_then_place_in_recep", "look_at_obj_in_light", "type0"])
    records, _ = asyncio.run(evaluate_cases(ctx, rows, 2, WRITTEN))
    assert ctx.retrieval.requests == [] and recorder.extractor == []
    by_key = {(r.task_id, r.repeat): r for r in records}
    assert len(by_key) == 6 and all(r.retrieved_id is None for r in records)
    for repeat in (0, 1):
        for task_id in ("t0", "t1"):
            record = by_key[(task_id, repeat)]
            assert record.skill_obtained and record.with_skill is not None
            assert record.without_skill is not None and record.skill_note is None
        assert by_key[("t2", repeat)].skill_note == NOTE_NO_WRITTEN_SKILL
    heat, lamp = cards["pick_heat_then_place_in_recep"], cards["look_at_obj_in_light"]
    assert any(heat in p and "put mug 0" in p for p in recorder.solver)
    assert any(lamp in p and "put mug 1" in p for p in recorder.solver)
    assert not any(heat in p for p in recorder.solver if "put mug 1" in p)


def test_the_report_shows_the_protocols_side_by_side_with_their_notes(tmp_path):
    _games(tmp_path / "games", {"game0": WIN, "game1": None})
    rows = _typed_rows(["pick_and_place_simple", "type0"])
    results = {"valid_unseen": {
        str(plan.protocol): asyncio.run(run_eval(_context(tmp_path, Recorder()), rows, plan=plan))
        for plan in (EvalPlan(split="valid_unseen"), EXPERT, WRITTEN)}}
    write_report(tmp_path / "report", {"environment": "alfworld", "policy": "scripted",
                                       "protocols": list(results["valid_unseen"])}, results)
    report = (tmp_path / "report" / "report.md").read_text()
    for protocol in ("reference", "expert_skill", "written_skill"):
        assert f"| {protocol} | all |" in report
    assert f"| expert_skill | {NOTE_NO_EXPERT} | 1 |" in report
    assert f"| written_skill | {NOTE_NO_WRITTEN_SKILL} | 1 |" in report


def test_both_protocols_resume_from_their_store(tmp_path):
    _games(tmp_path / "games", {"game0": WIN, "game1": WIN})
    store = CaseStore(tmp_path / "cases.jsonl")
    rows = _typed_rows(["pick_and_place_simple", "pick_two_obj_and_place"])
    for plan in (EXPERT, WRITTEN):
        plan = EvalPlan(protocol=plan.protocol, split=plan.split, store=store)
        first = asyncio.run(run_eval(_context(tmp_path, Recorder()), rows, repeats=2, plan=plan))
        recorder = Recorder()
        again = asyncio.run(run_eval(_context(tmp_path, recorder), rows, repeats=2, plan=plan))
        assert again == first and recorder.solver == recorder.extractor == []
    assert len(store.load()) == 8


def test_an_environment_without_the_capability_fails_at_startup(tmp_path):
    web = parse_config({"environment": "mind2web"})
    adapter = make_adapter(web, lenient=True)
    for protocol in (EvalProtocol.EXPERT_SKILL, EvalProtocol.WRITTEN_SKILL):
        with pytest.raises(UnsupportedProtocolError, match=f"{protocol}.*mind2web"):
            check_supported(adapter, protocol)
    recorder = Recorder()
    ctx = _context(tmp_path, recorder)
    ctx.adapter = adapter
    with pytest.raises(UnsupportedProtocolError, match="expert trajectories"):
        asyncio.run(evaluate_cases(ctx, [], 1, EXPERT))
    opened = []

    @contextlib.asynccontextmanager
    async def opener():
        opened.append(True)
        yield ctx.policy, TOK

    request = EvalRequest(out_dir=tmp_path / "out", splits=("test_task",),
                          protocols=(EvalProtocol.WRITTEN_SKILL,))
    with pytest.raises(UnsupportedProtocolError, match="hand-written skills"):
        # before any split is read or server started
        run_evaluation(web, checkpoint_spec(tmp_path / "step_0001"), request, opener)
    assert opened == [] and not (tmp_path / "out").exists()


class _GameDown(FakeEnvClient):
    """The toy server, with one game whose resets fail (an overloaded or broken worker)."""

    def __init__(self, down: str) -> None:
        super().__init__()
        self.down = down

    async def reset(self, body):
        if body["game"] == self.down:
            raise TransportError("fake env: reset timed out")
        return await super().reset(body)


@pytest.mark.parametrize(("plan", "note"), [(EXPERT, NOTE_EXPERT_FAILED),
                                            (REFERENCE, NOTE_SOURCE_FAILED)])
def test_a_skill_lost_to_the_environment_is_an_infra_failure(tmp_path, plan, note):
    """t1 retrieves t0, whose game cannot be reset: t1 gets no skill for an infrastructure
    reason, so its with-skill arm is unscored rather than counted as a no-skill episode."""
    _games(tmp_path / "games", {"game0": WIN, "game1": WIN})
    ctx = _context(tmp_path, Recorder())
    ctx.env = _GameDown("game0")
    records, _ = asyncio.run(evaluate_cases(ctx, toy_rows(2), 1, plan))
    t1 = {r.task_id: r for r in records}["t1"]
    assert t1.retrieved_id == "t0" and t1.skill_note == note and not t1.skill_obtained
    assert t1.with_skill is not None and not t1.with_skill.scored
    assert t1.without_skill.scored  # its own game plays
    metrics = asyncio.run(run_eval(ctx, toy_rows(2), plan=plan))
    # t0's own episodes fail too; only t1's without-skill episode is scored
    assert metrics["eval/infra_failures"] == 3.0
    assert metrics["eval/all/with_skill_scored"] == 0.0
    assert metrics["eval/all/without_skill_scored"] == 1.0
