"""Checkpoint evaluation end to end on generated Mind2Web data: every protocol, the three test
splits, the real env and retrieval servers (started and stopped by the evaluation runner itself),
a scripted policy, and the report's numbers against hand-computed expectations.

The scripted solver (`tests/fakes/web.WebSolver`) is right at every step when the good skill's
card is in its prompt and right only at step 0 otherwise (its wrong action keeps the gold op and
value, so the operation F1 stays 1). The server runs the reference's empty-positive fallback
(`tests/servers.py`), so its verdicts (success, first-error accuracy) count the acted element of a
step without a positive candidate as right; the standard metrics do not (MindAct), and their
`reference_fallback_*` twins do. Test tasks are played teacher forced, so without a skill a task
of n steps, p of them with a positive candidate, scores: element accuracy and step success 1/n
under the fallback ([step 0 has a positive] / n standard), operation F1 1, task success 0,
first-error action accuracy 1/2 (1 right of 2 attempted); with the skill element accuracy and
step success p/n and task success [p == n] (all 1 under the fallback), everything else 1.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from statistics import fmean

import pytest

from env.launch import read_pid
from env.mind2web.generate import GenerateSpec, generate
from env.mind2web.prepare import prepare
from env.mind2web.server import pid_file
from evolving_rl.config import load_config
from evolving_rl.evaluate.report import write_report
from evolving_rl.evaluate.runner import CASES_FILE, EvalRequest, run_evaluation
from evolving_rl.pipeline.eval_records import CaseStore
from evolving_rl.pipeline.evaluation import EvalProtocol
from evolving_rl.pipeline.skill_library import SkillLibrary, SkillRecord
from evolving_rl.retrieval import prepared
from tests.fakes.checkpoint import checkpoint_spec
from tests.fakes.scripted import SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.web import GoldPlay, WebSolver, gold_book
from tests.servers import web_contract_config_file

SPEC = GenerateSpec(tasks=16, seed=5, distractors=4, tasks_per_file=8, password="eval")
SPLITS = ("test_task", "test_website", "test_domain")
TOK = ByteChatTokenizer()


class Killed(RuntimeError):
    """Stands for the process being stopped mid-run."""


@pytest.fixture(scope="module")
def web_eval(tmp_path_factory):
    base = tmp_path_factory.mktemp("web_eval")
    root = generate(base / "root", SPEC).root
    prepared = base / "prepared"
    prepare(root, prepared, password=SPEC.password)
    cfg = load_config(web_contract_config_file(base, root, prepared))
    rows = {split: [json.loads(line) for line in (prepared / f"{split}.jsonl").read_text()
                    .splitlines()] for split in (*SPLITS, "train")}
    return cfg, gold_book(root, prepared), rows


def _opener(book, kill_at: int | None = None):
    solver = WebSolver(book)
    policy = ScriptedPolicy(TOK, skill_responder([json.dumps(SKILLS["reference"].good)], solver))

    @contextlib.asynccontextmanager
    async def open_scripted() -> AsyncIterator:
        if kill_at is not None:
            inner = policy.generate

            async def generate(prompt_ids, sampling):
                if policy.calls + 1 == kill_at:
                    raise Killed("stopped")
                return await inner(prompt_ids, sampling)

            policy.generate = generate
        yield policy, TOK

    return open_scripted, policy, solver


def _request(out: Path, *protocols: str, library: Path | None = None) -> EvalRequest:
    return EvalRequest(out_dir=out, splits=SPLITS, repeats=2,
                       protocols=tuple(EvalProtocol(p) for p in protocols), library=library)


def _expected(plays: list[list[GoldPlay]], with_skill: bool) -> dict[str, float]:
    """The hand-computed metrics of one arm over a split's tasks (module docstring)."""
    right = [[p.positive if with_skill or i == 0 else False for i, p in enumerate(task)]
             for task in plays]
    fallback = [[with_skill or i == 0 for i in range(len(task))] for task in plays]
    out = {"op_f1": 1.0, "first_error_action_accuracy": 1.0 if with_skill else 0.5,
           "success": float(with_skill)}
    for prefix, steps in (("", right), ("reference_fallback_", fallback)):
        out |= {f"{prefix}element_accuracy": fmean(fmean(task) for task in steps),
                f"{prefix}step_success_rate": fmean(fmean(task) for task in steps),
                f"{prefix}task_success_rate": fmean(float(all(task)) for task in steps),
                f"{prefix}op_f1": 1.0}
    return out


def _library(path: Path, rows: list[dict]) -> Path:
    good = SKILLS["reference"].good
    records = [SkillRecord(
        rollout="1", source_id=row["id"], source_question=row["question"],
        source_task_type=row["metadata"]["task_type"], source_success=True, skill_index=0,
        skill_format="reference", status="completed", parse_ok=True, parse_reason="ok",
        audit_ok=True, audit_rule=None, audit_detail="", skill=good, raw_text=json.dumps(good),
        downstream_ids=[], downstream_scores=[], reward=1.0, reward_status="ok")
        for row in rows]
    SkillLibrary(path).append(records)
    return path


def test_every_protocol_on_every_split_against_hand_computed_numbers(web_eval, tmp_path):
    cfg, book, rows = web_eval
    opener, _, solver = _opener(book)
    library = _library(tmp_path / "library.jsonl", rows["train"])
    protocols = ("reference", "no_skill", "least_similar", "self_inclusion", "library")
    request = _request(tmp_path / "out", *protocols, library=library)
    outcome = run_evaluation(cfg, checkpoint_spec(tmp_path / "step_0001"), request, opener)
    assert solver.misses == []  # every prompt showed the generated page of its step
    assert outcome.train_types == {r["metadata"]["task_type"] for r in rows["train"]}
    assert not all(p.positive for plays in book.values() for p in plays)  # the rules differ
    for split in SPLITS:
        plays = [book[r["question"]] for r in rows[split]]
        for protocol in protocols:
            metrics = outcome.results[split][protocol]
            assert metrics["eval/cases"] == 2 * len(plays)
            assert metrics["eval/infra_failures"] == 0.0
            for name, value in _expected(plays, with_skill=False).items():
                assert metrics[f"eval/all/without_skill_{name}_mean"] == pytest.approx(value)
                assert metrics[f"eval/all/without_skill_{name}_std"] == pytest.approx(0.0)
            if protocol == "no_skill":
                assert metrics["eval/skill_obtained_rate"] == 0.0
                assert not any("with_skill" in key for key in metrics)
                continue
            assert metrics["eval/skill_obtained_rate"] == 1.0
            for name, value in _expected(plays, with_skill=True).items():
                assert metrics[f"eval/all/with_skill_{name}_mean"] == pytest.approx(value)
    records = CaseStore(tmp_path / "out" / CASES_FILE).load().values()
    retrieved = {(r.protocol, r.task_id): r.retrieved_id for r in records}
    train_ids = {row["id"] for row in rows["train"]}
    tests = [(split, row["id"]) for split in SPLITS for row in rows[split]]
    assert all(retrieved[("reference", t)] in train_ids for _, t in tests)
    assert all(retrieved[("self_inclusion", t)] == t for _, t in tests)
    assert any(retrieved[("least_similar", t)] != retrieved[("reference", t)] for _, t in tests)
    # held-out task types of test_domain (none of its domains is in train)
    domain = outcome.results["test_domain"]["reference"]
    assert "eval/group/held_out_types/with_skill_success_mean" in domain
    assert not any(k.startswith("eval/group/training_types/") for k in domain)


def test_an_interrupted_run_resumes_to_the_same_report(web_eval, tmp_path):
    cfg, book, _ = web_eval
    opener, policy, _ = _opener(book)
    spec = checkpoint_spec(tmp_path / "step_0001")
    whole = run_evaluation(cfg, spec, _request(tmp_path / "whole", "reference"), opener)
    meta = {"environment": "mind2web", "policy": "scripted"}
    write_report(tmp_path / "whole", meta, whole.results)
    report = (tmp_path / "whole" / "report.md").read_text()
    assert "with skill, reference's fallback on steps without a positive candidate" in report
    first, _, _ = _opener(book, kill_at=policy.calls // 2)
    with pytest.raises(Killed):
        run_evaluation(cfg, spec, _request(tmp_path / "resumed", "reference"), first)
    done = len(CaseStore(tmp_path / "resumed" / CASES_FILE).load())
    total = int(sum(m["reference"]["eval/cases"] for m in whole.results.values()))
    assert 0 < done < total  # stopped half way: some cases finished, not all
    second, resumed_policy, _ = _opener(book)
    resumed = run_evaluation(cfg, spec, _request(tmp_path / "resumed", "reference"), second)
    assert resumed_policy.calls < policy.calls  # finished cases were not played again
    write_report(tmp_path / "resumed", meta, resumed.results)
    for name in ("report.json", "report.md"):
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "whole" / name).read_text()
    # the servers the runner started are gone
    assert read_pid(pid_file(cfg.mind2web)) is None
    assert asdict(whole) == asdict(resumed)


def test_the_prepared_data_is_read_once_per_evaluation(web_eval, tmp_path, monkeypatch):
    """Split rows, training types, the retrieval cache check and the task catalog share one
    parse of each prepared file (`retrieval.prepared.PreparedData`)."""
    cfg, book, _ = web_eval
    reads: Counter[str] = Counter()
    read = prepared.read_prepared

    def counted(path):
        reads[str(path)] += 1
        return read(path)

    monkeypatch.setattr(prepared, "read_prepared", counted)
    request = EvalRequest(out_dir=tmp_path / "out", splits=SPLITS[:1], repeats=1, limit=2)
    run_evaluation(cfg, checkpoint_spec(tmp_path / "step_0001"), request, _opener(book)[0])
    files = {str(path) for path in Path(cfg.mind2web.prepared_dir).glob("*.jsonl")}
    assert set(reads) == files and set(reads.values()) == {1}

