"""Each phase samples with its own settings. Training rollouts use the training ones
(`sampling.solver`, `sampling.extractor`), never the evaluation ones: a training rollout sampled
greedily gives every GRPO group zero variance and nothing to learn; the learning canary
(tests/local/test_probe_canary.py) catches that too, but only after its whole run. Every
evaluation call, of every protocol, uses the evaluation ones (`sampling.eval_solver`,
`sampling.eval_extractor`: greedy by default): an evaluation played with the training settings
passes the canary, and every held-out number becomes a sampled one while the report says greedy.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evolving_rl.clients.policy import Generation, SamplingParams
from evolving_rl.config import parse_config
from evolving_rl.pipeline.evaluation import EvalPlan, EvalProtocol, evaluate_cases
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, toy_rows
from tests.fakes.scripted import EXTRACTOR_MARKER, ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()
# Four roles told apart by every sampled setting; eval_solver is the greedy evaluation one.
SAMPLING = {"solver": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "max_new_tokens": 200},
            "extractor": {"temperature": 0.9, "top_p": 0.95, "top_k": 30,
                          "max_new_tokens": 4000},
            "eval_solver": {"temperature": 0.0, "top_p": 1.0, "top_k": -1,
                            "max_new_tokens": 200},
            "eval_extractor": {"temperature": 0.0, "top_p": 1.0, "top_k": 3,
                               "max_new_tokens": 4000}}
SIZES = {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_steps": 2, "max_context_tokens": 16384}
# Task types with a hand-written card (protocol written_skill); every game's expert walkthrough
# wins the toy game (protocol expert_skill).
TYPES = ["pick_and_place_simple", "look_at_obj_in_light"]
WALKTHROUGH = ["go to desk 1", "take mug 1 from desk 1"]


class RecordingPolicy(ScriptedPolicy):
    """The scripted policy, recording (extractor call?, sampling) of every generation."""

    def __init__(self) -> None:
        super().__init__(TOK)
        self.seen: list[tuple[bool, SamplingParams]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.seen.append((EXTRACTOR_MARKER in TOK.decode(prompt_ids), sampling))
        return await super().generate(prompt_ids, sampling)


def _settings(sampling: SamplingParams) -> tuple[float, float, int]:
    return sampling.temperature, sampling.top_p, sampling.top_k


@pytest.mark.parametrize("method", ["evolving", "grpo_baseline"])
def test_training_rollouts_use_the_training_sampling_settings(tmp_path, method):
    cfg = parse_config({"pipeline": {"method": method, "n_skills": 2, "top_k": 2,
                                     "n_repeats": 1, "max_steps": 2,
                                     "max_context_tokens": 16384},
                        "sampling": SAMPLING})
    policy = RecordingPolicy()
    ctx = fake_context(tmp_path, cfg, policy=policy)
    asyncio.run(run_training_rollout(ctx, toy_rows(2), rollout_id=1))
    solver = [s for extractor, s in policy.seen if not extractor]
    extractor = [s for extractor, s in policy.seen if extractor]
    assert solver and (extractor or method == "grpo_baseline")
    assert {_settings(s) for s in solver} == {(0.7, 0.8, 20)}
    assert all(s.max_new_tokens <= 200 for s in solver)
    assert {_settings(s) for s in extractor} <= {(0.9, 0.95, 30)}


def _eval_context(tmp_path: Path, policy: ScriptedPolicy):
    games = tmp_path / "games"
    for game in ("game0", "game1", "game2"):
        (games / game).mkdir(parents=True, exist_ok=True)
        (games / game / "game.tw-pddl").write_text(json.dumps({"walkthrough": WALKTHROUGH}))
    cfg = parse_config({"pipeline": SIZES, "sampling": SAMPLING,
                        "alfworld": {"data_root": str(games)}})
    return fake_context(tmp_path, cfg, policy=policy)


def _typed_rows() -> list[dict]:
    rows = toy_rows(len(TYPES))
    return [{**row, "metadata": {**row["metadata"], "task_type": task_type}}
            for row, task_type in zip(rows, TYPES, strict=True)]


@pytest.mark.parametrize("protocol", list(EvalProtocol))
def test_every_evaluation_call_uses_the_evaluation_sampling_settings(tmp_path, protocol):
    """Fails with `sampling.solver` for `sampling.eval_solver` in `evaluation._run_case` (the test
    task's episodes: every protocol fails) or in `evaluation._attempt_card` (the retrieved task's
    source episode: reference, least_similar, self_inclusion), or with `sampling.extractor` for
    `sampling.eval_extractor` in `extraction.greedy_card` (those three and expert_skill)."""
    library = None
    if protocol is EvalProtocol.LIBRARY:  # a library built by a training rollout beforehand
        train = _eval_context(tmp_path, ScriptedPolicy(TOK))
        asyncio.run(run_training_rollout(train, toy_rows(3), rollout_id=1))
        library = train.library
    policy = RecordingPolicy()
    ctx = _eval_context(tmp_path, policy)
    plan = EvalPlan(protocol=protocol, split="valid_unseen", library=library)
    records, _ = asyncio.run(evaluate_cases(ctx, _typed_rows(), 1, plan))
    solver = {_settings(s) for extractor, s in policy.seen if not extractor}
    extractor = {_settings(s) for extractor, s in policy.seen if extractor}
    assert solver == {(0.0, 1.0, -1)}
    extracts = protocol not in (EvalProtocol.NO_SKILL, EvalProtocol.LIBRARY,
                                EvalProtocol.WRITTEN_SKILL)
    assert extractor == ({(0.0, 1.0, 3)} if extracts else set())
    assert any(r.skill_obtained for r in records) == (protocol is not EvalProtocol.NO_SKILL)
