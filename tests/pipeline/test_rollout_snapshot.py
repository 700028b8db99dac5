"""One training rollout per config, against a recorded snapshot: a refactor that changes no
behaviour leaves every metric and every sample as it was.

Each case runs the real `pipeline.rollout.run_training_rollout` with the scripted policy, the toy
env and in-memory retrieval (`tests/fakes/`), over configs that take different paths: both methods,
both skill formats, both `unusable_skills` modes, grid sizes, the source episode trained or not, the
source task retrieved or not, reply prefixes, reward shaping and role weights. What is compared: the
metrics (wall-clock `timing/` ones aside) and, per sample in emitted order, its role, group, status,
reward, advantage, lengths, metadata and digests of its token ids, loss mask and log-probs. Floats
are rounded to 6 decimals first, so only a real change shows.

`UPDATE_ROLLOUT_SNAPSHOT=1 pytest tests/pipeline/test_rollout_snapshot.py` rewrites the snapshot
(`rollout_snapshot.json` beside this file); do that only for a change that means to alter it.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evolving_rl.config import parse_config
from evolving_rl.core.samples import TrainSample
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, toy_rows, turn_sampling
from tests.fakes.scripted import SKILLS, ScriptedPolicy, reply_text, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer

SNAPSHOT = Path(__file__).with_name("rollout_snapshot.json")
UPDATE = os.environ.get("UPDATE_ROLLOUT_SNAPSHOT") == "1"
DECIMALS = 6
SIZES = {"n_skills": 3, "top_k": 2, "n_repeats": 2, "max_steps": 4,
         "max_context_tokens": 16384}


def _wandering(prompt: str) -> str:
    """Solver: wins at once with the good skill; otherwise one inadmissible action, then
    admissible moves that never win."""
    if "Skill: Take the mug" in prompt:
        return "<action>take mug 1 from desk 1</action>"
    first_turn = prompt.rsplit("Step ", 1)[-1].startswith("0.")
    return "<action>fly away</action>" if first_turn else "<action>go to shelf 1</action>"


def _by_call(actions: tuple[str, ...]) -> Callable[[str], str]:
    """Solver replies cycling through `actions` by call count (for the skill-free baseline)."""
    cycle = itertools.cycle(actions)
    return lambda prompt: f"<reasoning>Go.</reasoning><action>{next(cycle)}</action>"


def _skills(fmt: str, *kinds: str) -> list[str]:
    """Extractor outputs of format `fmt`: a skill kind of `SKILLS` or raw text."""
    return [json.dumps(getattr(SKILLS[fmt], kind)) if kind in ("good", "bad", "chinese")
            else kind for kind in kinds]


@dataclass(frozen=True)
class Case:
    """One rollout: config sections over the fakes' sizes, the responder, the rows played."""

    pipeline: dict[str, Any] = field(default_factory=dict)
    rewards: dict[str, Any] = field(default_factory=dict)
    responder: Callable[[], Callable[[str], str]] = lambda: reply_text
    rows: int = 2


CASES = {
    "evolving_reference_as_written": Case(
        responder=lambda: skill_responder(_skills("reference", "good", "bad", "{not json"))),
    "evolving_compact_skip": Case(
        {"skill_format": "compact", "unusable_skills": "skip"},
        responder=lambda: skill_responder(_skills("compact", "good", "chinese", "no json"))),
    "evolving_compact_audit_and_penalties": Case(
        {"skill_format": "compact", "n_skills": 4, "top_k": 1, "n_repeats": 3},
        {"invalid_action_penalty": 0.5, "format_penalty": 0.3, "audit_penalty": 0.7,
         "extractor_weight": 0.5},
        lambda: skill_responder(_skills("compact", "good", "chinese", "bad", "oops"),
                                solver=_wandering), rows=3),
    "evolving_source_episode_trained": Case(
        {"train_on_source_episode": True, "n_skills": 2, "top_k": 3, "n_repeats": 1}),
    "evolving_source_retrieved_drop_zero_variance": Case(
        {"include_source_in_retrieval": True, "skill_format": "compact"},
        {"drop_zero_variance_groups": True},
        lambda: skill_responder(_skills("compact", "good", "bad")), rows=3),
    "evolving_reply_prefix_short_episodes": Case(
        {"solver_reply_prefix": "<reasoning>", "max_steps": 2, "n_repeats": 1, "top_k": 3},
        {"solver_weight": 0.5, "advantage_eps": 0.01},
        lambda: skill_responder(_skills("reference", "bad", "good", "chinese"))),
    "grpo_baseline": Case(
        {"method": "grpo_baseline", "n_repeats": 1},
        {"invalid_action_penalty": 0.25},
        lambda: _by_call(("take mug 1 from desk 1", "go to desk 1", "dance wildly",
                          "go to shelf 1", "look")), rows=3),
}


def _rounded(value: Any) -> Any:
    """`value` with every float rounded (recursively through lists, tuples and dicts)."""
    if isinstance(value, float):
        return round(value, DECIMALS)
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _digest(values: Any) -> str:
    return hashlib.sha256(json.dumps(_rounded(values)).encode()).hexdigest()[:16]


def _sample_record(sample: TrainSample) -> dict[str, Any]:
    return _rounded({
        "role": str(sample.role), "group_id": sample.group_id, "status": str(sample.status),
        "reward": sample.reward, "advantage": sample.advantage,
        "lengths": [len(sample.prompt_ids), len(sample.response_ids), sum(sample.loss_mask)],
        "prompt_ids": _digest(sample.prompt_ids), "response_ids": _digest(sample.response_ids),
        "loss_mask": _digest(sample.loss_mask), "log_probs": _digest(sample.log_probs),
        "metadata": json.loads(json.dumps(sample.metadata, sort_keys=True, default=str))})


def _run(case: Case, tmp_path: Path) -> dict[str, Any]:
    cfg = parse_config({"pipeline": {**SIZES, **case.pipeline}, "rewards": case.rewards,
                        "sampling": turn_sampling(200)})
    ctx = fake_context(tmp_path, cfg, policy=ScriptedPolicy(ByteChatTokenizer(), case.responder()))
    outcome = asyncio.run(run_training_rollout(ctx, toy_rows(case.rows), rollout_id=5))
    metrics = {k: v for k, v in outcome.metrics.items() if not k.startswith("timing/")}
    return {"metrics": _rounded(metrics), "samples": [_sample_record(s) for s in outcome.samples]}


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text()) if SNAPSHOT.is_file() else {}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rollout_matches_the_snapshot(name, tmp_path, recorded):
    got = _run(CASES[name], tmp_path)
    if UPDATE:
        recorded[name] = got
        SNAPSHOT.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        return
    assert name in recorded, f"no snapshot of {name}: record it with UPDATE_ROLLOUT_SNAPSHOT=1"
    want = recorded[name]
    assert got["metrics"] == want["metrics"]
    assert len(got["samples"]) == len(want["samples"])
    for index, (sample, expected) in enumerate(zip(got["samples"], want["samples"], strict=True)):
        assert sample == expected, f"sample {index}"


def test_the_cases_cover_both_methods_formats_and_modes():
    pipelines = [{**SIZES, **case.pipeline} for case in CASES.values()]
    assert {p.get("method", "evolving") for p in pipelines} == {"evolving", "grpo_baseline"}
    assert {p.get("skill_format", "reference") for p in pipelines} == {"reference", "compact"}
    assert {p.get("unusable_skills", "as_written") for p in pipelines} == {"as_written", "skip"}
    assert any(p.get("train_on_source_episode") for p in pipelines)
