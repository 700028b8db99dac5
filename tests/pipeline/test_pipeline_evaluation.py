"""The evaluation protocols with fakes: retrieved task -> greedy skill -> test task with and
without it, over repeats; the persisted-library variant (in both skill formats); the retrieval
settings of each protocol; the card each test task reads comes from its own retrieved task;
resuming an interrupted run."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence

import pytest

from evolving_rl.clients.retrieval import RetrievedTask, SearchQuery
from evolving_rl.pipeline.eval_records import CaseStore
from evolving_rl.pipeline.evaluation import EvalPlan, EvalProtocol, evaluate_cases, run_eval
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.scripted import EXTRACTOR_MARKER, SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import FakeRetrievalClient

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


@pytest.mark.parametrize(("mode", "obtained"), [("as_written", 1.0), ("skip", 0.0)])
def test_an_unparsed_skill_is_shown_as_written_unless_skipped(tmp_path, mode, obtained):
    shown: list[str] = []

    def solver(prompt: str) -> str:
        shown.append(prompt)
        return "<action>look</action>"

    policy = ScriptedPolicy(TOK, skill_responder(["  {broken skill"], solver=solver))
    ctx = fake_context(tmp_path, small_config(unusable_skills=mode), policy=policy)
    metrics = asyncio.run(run_eval(ctx, toy_rows(2), repeats=1))
    assert metrics["eval/skill_obtained_rate"] == obtained
    assert any("{broken skill" in prompt for prompt in shown) == (mode == "as_written")


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


def _policy(fmt: str = "reference") -> ScriptedPolicy:
    return ScriptedPolicy(TOK, skill_responder([json.dumps(SKILLS[fmt].good)]))


def test_protocols_set_retrieval_as_named(tmp_path):
    ctx = fake_context(tmp_path, small_config(skill_format="reference"), policy=_policy())
    rows = toy_rows(3)
    for protocol in ("reference", "least_similar", "self_inclusion"):
        plan = EvalPlan(protocol=EvalProtocol(protocol), split="valid_unseen",
                        retrieval_split="train")
        metrics = asyncio.run(run_eval(ctx, rows, plan=plan))
        assert metrics["eval/skill_obtained_rate"] == 1.0
    queries = [request[0] for request in ctx.retrieval.requests]
    assert ctx.retrieval.options == [
        {"split": "train", "order": "most_similar"},
        {"split": "train", "order": "least_similar"},
        {"split": "valid_unseen", "order": "most_similar"}]
    # the test task is excluded, except under self-inclusion
    assert [q.exclude_ids for q in queries[0]] == [("t0",), ("t1",), ("t2",)]
    assert all(q.exclude_ids == () for q in queries[2])
    assert ctx.cfg.pipeline.retrieval_order == "most_similar"  # the caller's config is untouched


def test_no_skill_protocol_neither_retrieves_nor_extracts(tmp_path):
    policy = _policy()
    ctx = fake_context(tmp_path, small_config(skill_format="reference"), policy=policy)
    plan = EvalPlan(protocol=EvalProtocol.NO_SKILL, split="valid_unseen")
    metrics = asyncio.run(run_eval(ctx, toy_rows(3), repeats=2, plan=plan))
    assert ctx.retrieval.requests == [] and metrics["eval/skill_obtained_rate"] == 0.0
    assert metrics["eval/all/without_skill_success_mean"] == 0.0
    assert not any("with_skill" in key for key in metrics)
    assert policy.calls == 6 * ctx.cfg.pipeline.max_steps  # 3 tasks x 2 repeats, no extraction
    with pytest.raises(ValueError, match="library"):
        asyncio.run(run_eval(ctx, toy_rows(1), plan=EvalPlan(protocol=EvalProtocol.LIBRARY)))


def test_an_interrupted_run_resumes_to_the_same_report(tmp_path):
    rows = toy_rows(4)

    def run(store: CaseStore) -> tuple[dict[str, float], int]:
        policy = _policy()
        ctx = fake_context(tmp_path, small_config(skill_format="reference"), policy=policy)
        plan = EvalPlan(split="valid_unseen", store=store, train_types={"type0"})
        return asyncio.run(run_eval(ctx, rows, repeats=2, plan=plan)), policy.calls

    whole, calls_whole = run(CaseStore(tmp_path / "whole.jsonl"))
    records = CaseStore(tmp_path / "whole.jsonl").load()
    assert len(records) == 8
    partial = CaseStore(tmp_path / "partial.jsonl")
    partial.append(list(records.values())[:5])  # the run was stopped after 5 cases
    resumed, calls_resumed = run(partial)
    assert resumed == whole
    assert 0 < calls_resumed < calls_whole  # only the 3 missing cases ran
    assert len(partial.load()) == 8
    again, calls_again = run(partial)
    assert again == whole and calls_again == 0


class _Shifted(FakeRetrievalClient):
    """Task t<i> retrieves t<i+2>, then t<i+3>... (mod 6): a different task for every query."""

    async def search(self, queries: Sequence[SearchQuery], k: int,
                     **options) -> list[list[RetrievedTask]]:
        await super().search(queries, k, **options)
        shifted = [int(query.exclude_ids[0][1:]) + 2 for query in queries]
        return [[RetrievedTask(f"t{(i + j) % 6}", "", "toy", 1.0) for j in range(k)]
                for i in shifted]


class _NamedCards:
    """The extractor names its card after its task ("Skill of mug N"); the solver keeps, per
    task it plays, the card names it was shown."""

    def __init__(self) -> None:
        self.shown: dict[str, set[str]] = {}

    def __call__(self, prompt: str) -> str:
        mug = re.findall(r"put mug (\d+) on the desk", prompt)[-1]
        if EXTRACTOR_MARKER in prompt:
            return json.dumps({**SKILLS["compact"].valid, "name": f"Skill of mug {mug}"})
        cards = self.shown.setdefault(mug, set())
        cards.update(re.findall(r"Skill: Skill of mug (\d+)", prompt))
        return "<action>go to shelf 1</action>"


@pytest.mark.parametrize("protocol", [EvalProtocol.REFERENCE, EvalProtocol.LIBRARY])
def test_each_test_task_reads_the_card_of_its_own_retrieved_task(tmp_path, protocol):
    """Fails when `evaluation._skill_for` extracts from (or looks up in the library) the test
    task instead of the retrieved one, or when `evaluate_cases` pairs a test task with another
    task's retrieval (`by_task` built from a rotated `retrieved`)."""
    cfg = small_config(skill_format="compact", max_steps=1)
    library = None
    if protocol is EvalProtocol.LIBRARY:  # every task's cards, named after it
        train = fake_context(tmp_path, cfg, policy=ScriptedPolicy(TOK, _NamedCards()),
                             retrieval=_Shifted([]))
        asyncio.run(run_training_rollout(train, toy_rows(6)))
        library = train.library
    cards = _NamedCards()
    ctx = fake_context(tmp_path, cfg, policy=ScriptedPolicy(TOK, cards), retrieval=_Shifted([]))
    plan = EvalPlan(protocol=protocol, split="valid_unseen", library=library)
    records, _ = asyncio.run(evaluate_cases(ctx, toy_rows(4), 1, plan))
    assert all(r.skill_obtained for r in records)
    assert {r.task_id: r.retrieved_id for r in records} == {
        f"t{i}": f"t{i + 2}" for i in range(4)}
    for i in range(4):
        assert cards.shown[str(i)] == {str(i + 2)}
