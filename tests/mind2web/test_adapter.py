"""The Mind2Web adapter with fakes: a scripted policy playing a fake env client that follows the
env server's wire contract (episode views, train / eval modes, step verdicts).

Covers step prompts (one sample per step, no dialogue history), action parsing and the
unreadable-reply path, rewards (step samples 1 if correct; extractor = mean downstream fraction
of correct steps), both solver groupings, no gold in the extractor's trajectory, and the
standard metrics from teacher-forced (eval) episodes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from evolving_rl.config import parse_config
from evolving_rl.core.grid import extractor_group_id, solver_group_id, step_group_id
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus
from evolving_rl.core.skill import SkillFormat
from evolving_rl.domains.mind2web import NO_ACTION, Mind2WebAdapter, step_outcomes
from evolving_rl.domains.mind2web_metrics import split_metrics
from evolving_rl.domains.registry import domain_for
from evolving_rl.pipeline.context import PipelineContext, TaskCatalog, make_adapter
from evolving_rl.pipeline.episode import run_episode
from evolving_rl.pipeline.evaluation import EvalPlan, run_eval
from evolving_rl.pipeline.rollout import run_training_rollout
from evolving_rl.pipeline.skill_library import SkillLibrary
from evolving_rl.pipeline.timing import IOClock
from tests.fakes.context import turn_sampling
from tests.fakes.scripted import SKILLS, ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import FakeRetrievalClient

TOK = ByteChatTokenizer()
REF = re.compile(r"^e[1-9]\d{0,6}$")
# Three tasks of three steps: (op, ref, value, the gold action repr shown as a previous action).
GOLD = {f"w{i}": [("CLICK", "e2", "", f"[link] Flights {i}"),
                  ("TYPE", "e5", f"city {i}", f"[textbox] From -> TYPE: city {i}"),
                  ("SELECT", "e3", "2", "[combobox] Travellers -> SELECT: 2")]
        for i in range(3)}
GOOD_CARD = "# Skill: Take the mug"  # the card of SKILLS["reference"].good


def _snapshot(task_id: str, step: int) -> str:
    return "\n".join(f'[e{n}] button "{task_id} step {step} control {n}"' for n in range(1, 7))


class FakeWebEnv:
    """Answers /reset and /step with the episode views of the wire contract."""

    def __init__(self) -> None:
        self.episodes: dict[str, dict[str, Any]] = {}
        self.sent: list[dict[str, str]] = []
        self.closed: list[str] = []
        self._ids = itertools.count()

    def _view(self, episode_id: str) -> dict[str, Any]:
        ep = self.episodes[episode_id]
        gold = GOLD[ep["task"]]
        return {"episode_id": episode_id, "task_id": ep["task"], "task": f"book {ep['task']}",
                "website": "site", "domain": "Travel", "subdomain": "Airlines",
                "step": ep["step"], "n_steps": len(gold),
                "observation": "" if ep["done"] else _snapshot(ep["task"], ep["step"]),
                "previous_actions": [g[3] for g in gold[:ep["step"]]], "done": ep["done"],
                "won": ep["done"] and ep["correct"] == len(gold), "steps_correct": ep["correct"]}

    async def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        assert set(body) == {"task", "mode"} and body["mode"] in ("train", "eval")
        episode_id = f"m{next(self._ids)}"
        self.episodes[episode_id] = {"task": body["task"], "mode": body["mode"], "step": 0,
                                     "correct": 0, "done": False}
        return self._view(episode_id)

    async def step(self, episode_id: str, action: dict[str, str]) -> dict[str, Any]:
        assert action["op"] in ("CLICK", "TYPE", "SELECT") and REF.match(action["ref"])
        self.sent.append(action)
        ep = self.episodes[episode_id]
        op, ref, value, _ = GOLD[ep["task"]][ep["step"]]
        element = action["ref"] == ref
        op_ok = action["op"] == op and action["value"] == value
        correct = element and op_ok
        ep["correct"] += correct
        if correct or ep["mode"] == "eval":
            ep["step"] += 1
        ep["done"] = ep["step"] >= len(GOLD[ep["task"]]) or (not correct and ep["mode"] == "train")
        result = {"correct": correct, "element_correct": element, "op_correct": op_ok,
                  "op_f1": 1.0 if op_ok else 0.5, "match": "positive" if element else "none"}
        return {**self._view(episode_id), "result": result}

    async def close_episode(self, episode_id: str) -> dict[str, Any]:
        self.closed.append(episode_id)
        return {"closed": True}


def _gold_reply(prompt: str) -> str:
    task = re.search(r"Your task is to: book (w\d+)", prompt).group(1)
    step = int(re.search(r"\[Step (\d+)\]", prompt).group(1))
    op, ref, value, _ = GOLD[task][step]
    return json.dumps({"op": op, "ref": ref, "value": value} if value else {"op": op, "ref": ref})


def web_responder(extractions: list[str] | None = None, wrong_at: int = 1):
    """Gold actions with the good skill's card; without it, right up to step `wrong_at`."""
    outputs = itertools.cycle(extractions or [json.dumps(SKILLS["reference"].good)])

    def respond(prompt: str) -> str:
        if "<<<BEGIN_TRAJECTORY>>>" in prompt:
            return next(outputs)
        step = int(re.search(r"\[Step (\d+)\]", prompt).group(1))
        if GOOD_CARD in prompt or step < wrong_at:
            return f"<reasoning>go</reasoning><action>{_gold_reply(prompt)}</action>"
        return "<reasoning>go</reasoning><action>CLICK e6</action>"

    return respond


def _rows() -> list[dict[str, Any]]:
    return [{"id": task, "question": f"book {task}", "prompt": f"book {task}",
             "metadata": {"annotation_id": task, "task_type": "Travel/Airlines", "split": "train",
                          "source_file": "data/train/train_0.json", "task_index": i,
                          "n_steps": 3}} for i, task in enumerate(GOLD)]


def _context(tmp_path: Path, responder, adapter: Mind2WebAdapter | None = None,
             **pipeline: Any) -> PipelineContext:
    sizes = {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_steps": 6,
             "max_context_tokens": 16384, **pipeline}
    cfg = parse_config({"environment": "mind2web", "pipeline": sizes,
                        "sampling": turn_sampling(200)})
    adapter = adapter or make_adapter(cfg)
    rows = _rows()
    return PipelineContext(
        cfg=cfg, adapter=adapter, policy=ScriptedPolicy(TOK, responder), tokenizer=TOK,
        env=FakeWebEnv(), retrieval=FakeRetrievalClient([r["id"] for r in rows]),
        catalog=TaskCatalog({r["id"]: adapter.task_from_row(r) for r in rows}),
        library=SkillLibrary.in_run_dir(tmp_path))


def _play(ctx: PipelineContext, task_id: str = "w0", card: str | None = None):
    task = ctx.catalog.get(task_id)
    sampling = ctx.sampling(ctx.cfg.sampling.solver, solver=True)
    return asyncio.run(run_episode(ctx, IOClock(), task, card, sampling))


def test_registered_with_its_env_url():
    cfg = parse_config({"environment": "mind2web"})
    domain = domain_for(cfg)
    assert isinstance(domain.adapter(cfg, False), Mind2WebAdapter)
    assert domain.env_url(cfg) == f"http://{cfg.mind2web.host}:{cfg.mind2web.port}"


def test_each_step_is_its_own_prompt_and_sample(tmp_path):
    ctx = _context(tmp_path, web_responder(wrong_at=99))
    result = _play(ctx)
    assert result.status is SampleStatus.COMPLETED and result.score == 1.0 and result.success
    trace = result.trace
    assert len(trace.steps) == len(trace.turns) == 3 and trace.response_ids == []
    for step, record in enumerate(trace.steps):
        prompt = TOK.decode(record.prompt_ids)
        assert f"[Step {step}]" in prompt and _snapshot("w0", step) in prompt
        assert "<reasoning>go</reasoning>" not in prompt  # no earlier reply: no history
        for _, _, _, previous in GOLD["w0"][:step]:
            assert previous in prompt
        assert record.loss_mask == [1] * len(record.response_ids)
    samples = ctx.adapter.pack(trace, result.status, 1.0, Role.SOLVER, "g", {"x": 1})
    assert [s.metadata["step_index"] for s in samples] == [0, 1, 2]
    assert [s.reward for s in samples] == [1.0, 1.0, 1.0]
    assert all(s.metadata["x"] == 1 and s.group_id == "g" for s in samples)
    assert ctx.env.closed == ["m0"]


def test_train_mode_ends_at_the_first_wrong_step(tmp_path):
    ctx = _context(tmp_path, web_responder(wrong_at=1))
    result = _play(ctx)
    assert result.status is SampleStatus.COMPLETED and result.score == pytest.approx(1 / 3)
    assert not result.success and result.n_steps == 2
    samples = ctx.adapter.pack(result.trace, result.status, 0.0, Role.SOLVER, "g", {})
    assert [s.reward for s in samples] == [1.0, 0.0]
    assert [s.metadata["step_correct"] for s in samples] == [True, False]
    # infrastructure failure: the episode's reward is undefined, so is every step's
    failed = ctx.adapter.pack(result.trace, SampleStatus.ENV_ERROR, None, Role.SOLVER, "g", {})
    assert [s.reward for s in failed] == [None, None]


def test_unreadable_reply_is_a_counted_wrong_step(tmp_path):
    ctx = _context(tmp_path, lambda prompt: "I would click the search button.")
    result = _play(ctx)
    assert result.status is SampleStatus.COMPLETED and result.score == 0.0
    assert result.action_statuses == {"no_action_tag": 1}
    assert ctx.env.sent == [NO_ACTION.to_wire()]


def test_invalid_action_penalty_costs_only_the_unreadable_steps(tmp_path):
    replies = iter(["<action>CLICK e6</action>", "no action at all"])
    ctx = _context(tmp_path, lambda prompt: next(replies), max_steps=2,
                   adapter=Mind2WebAdapter(mode="eval", invalid_action_penalty=0.2))
    result = _play(ctx)
    samples = ctx.adapter.pack(result.trace, result.status, 0.0, Role.SOLVER, "g", {})
    assert [s.reward for s in samples] == [0.0, pytest.approx(-0.2)]
    cfg = parse_config({"environment": "mind2web", "rewards": {"invalid_action_penalty": 0.3}})
    assert make_adapter(cfg).invalid_action_penalty == 0.3


def test_eval_mode_is_teacher_forced_and_gives_the_standard_metrics(tmp_path):
    ctx = _context(tmp_path, web_responder(wrong_at=1), adapter=Mind2WebAdapter(mode="eval"))
    result = _play(ctx)
    assert result.n_steps == 3 and result.score == pytest.approx(1 / 3)
    outcomes = step_outcomes(result.trace.turns)
    assert [o.element_correct for o in outcomes] == [True, False, False]
    metrics = split_metrics([outcomes, step_outcomes(_play(ctx, "w1", GOOD_CARD).trace.turns)])
    # task w0: element 1/3, op F1 (1 + .5 + .5)/3, step SR 1/3, task 0; w1 all 1
    assert metrics.element_accuracy == pytest.approx((1 / 3 + 1) / 2)
    assert metrics.op_f1 == pytest.approx((2 / 3 + 1) / 2)
    assert metrics.step_success_rate == pytest.approx((1 / 3 + 1) / 2)
    assert metrics.task_success_rate == 0.5


def test_extractor_trajectory_has_no_gold_and_fits_its_budget(tmp_path):
    ctx = _context(tmp_path, web_responder(wrong_at=99))
    turns = _play(ctx).trace.turns
    task = ctx.catalog.get("w0")
    for fmt in SkillFormat:
        text = "\n".join(m["content"] for m in ctx.adapter.extractor_messages(
            task, turns, True, fmt))
        assert _snapshot("w0", 2) in text and '"ref": "e3"' in text
        assert not any(previous in text for *_, previous in GOLD["w0"])
    small = Mind2WebAdapter(trajectory_chars=600)
    text = small.extractor_messages(task, turns, True, SkillFormat.REFERENCE)[0]["content"]
    trajectory = text.split("<<<BEGIN_TRAJECTORY>>>\n")[1].split("\n<<<END_TRAJECTORY>>>")[0]
    assert len(trajectory) <= 600 + 3 * 80 and "more lines)" in trajectory
    assert all(f"[Step {i}]" in trajectory for i in range(3))


@pytest.mark.parametrize("grouping", ["task", "step_index"])
def test_rollout_rewards_and_both_groupings(tmp_path, grouping):
    extractions = [json.dumps(SKILLS["reference"].good), json.dumps(SKILLS["reference"].bad)]
    ctx = _context(tmp_path, web_responder(extractions, wrong_at=1), solver_grouping=grouping)
    outcome = asyncio.run(run_training_rollout(ctx, _rows()[:1], rollout_id=3))
    key = "0:w0"
    extractor = sorted((s for s in outcome.samples if s.role is Role.EXTRACTOR),
                       key=lambda s: s.metadata["skill_index"])
    assert [s.group_id for s in extractor] == [extractor_group_id(key)] * 2
    # good skill: every downstream step right (fraction 1); bad skill: 1 of 3 steps right
    assert [s.reward for s in extractor] == pytest.approx([1.0, 1 / 3])
    solver = [s for s in outcome.samples if s.role is Role.SOLVER]
    # per retrieved task: good skill 3 step samples, bad skill 2 (its episode stops at step 1)
    assert len(solver) == 2 * (3 + 2)
    for sample in solver:
        base = solver_group_id(key, sample.metadata["retrieved_rank"])
        expected = (base if grouping == "task"
                    else step_group_id(base, sample.metadata["step_index"]))
        assert sample.group_id == expected
        assert sample.reward == float(sample.metadata["step_correct"])
    groups = {s.group_id for s in solver}
    assert len(groups) == (2 if grouping == "task" else 2 * 3)


def test_eval_protocol_plays_test_tasks_teacher_forced_and_reports_the_standard_metrics(tmp_path):
    ctx = _context(tmp_path, web_responder(wrong_at=1))
    plan = EvalPlan(split="test_task", retrieval_split="train")
    metrics = asyncio.run(run_eval(ctx, _rows()[:2], plan=plan))
    modes = [episode["mode"] for episode in ctx.env.episodes.values()]
    # per test task: its plain episode (eval), the retrieved task's source episode (train, as
    # in training) and the episode with the extracted skill (eval)
    assert sorted(modes) == ["eval"] * 4 + ["train"] * 2
    # with the good skill's card every step is gold; without it, wrong from step 1 on, and
    # teacher forcing plays all three steps: element 1/3, op F1 (1 + .5 + .5)/3, step SR 1/3,
    # task 0; the first-error action accuracy counts 1 correct of 2 attempted
    assert metrics["eval/all/with_skill_task_success_rate_mean"] == 1.0
    assert metrics["eval/all/with_skill_element_accuracy_mean"] == 1.0
    assert metrics["eval/all/without_skill_element_accuracy_mean"] == pytest.approx(1 / 3)
    assert metrics["eval/all/without_skill_op_f1_mean"] == pytest.approx(2 / 3)
    assert metrics["eval/all/without_skill_step_success_rate_mean"] == pytest.approx(1 / 3)
    assert metrics["eval/all/without_skill_task_success_rate_mean"] == 0.0
    assert metrics["eval/all/without_skill_first_error_action_accuracy_mean"] == 0.5
    assert metrics["eval/all/without_skill_success_mean"] == 0.0


def test_eval_metrics_score_both_empty_positive_rules():
    # task A: step 0 right; step 1 has no positive candidate and the reference's fallback
    # accepts the element. Task B was recorded before the fallback column existed.
    episodes = [{"steps": [[True, 1.0, True], [False, 1.0, True]], "first_error": [1, 2]},
                {"steps": [[True, 1.0], [True, 0.5]], "first_error": [1, 2]}]
    metrics = Mind2WebAdapter(mode="eval").eval_metrics(episodes)
    assert metrics["element_accuracy"] == pytest.approx((1 / 2 + 1) / 2)
    assert metrics["reference_fallback_element_accuracy"] == 1.0
    assert metrics["step_success_rate"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert metrics["reference_fallback_step_success_rate"] == pytest.approx((1 + 1 / 2) / 2)
    assert metrics["task_success_rate"] == 0.0
    assert metrics["reference_fallback_task_success_rate"] == 0.5
    assert metrics["op_f1"] == metrics["reference_fallback_op_f1"] == pytest.approx(0.875)


def test_unreadable_replies_score_no_operation_f1(tmp_path):
    ctx = _context(tmp_path, lambda prompt: "nothing readable",
                   adapter=Mind2WebAdapter(mode="eval"))
    outcomes = step_outcomes(_play(ctx).trace.turns)
    # NO_ACTION is a CLICK: without the rule the gold CLICK of step 0 would earn F1 1 (fake: .5+)
    assert [(o.element_correct, o.op_f1) for o in outcomes] == [(False, 0.0)] * 3
