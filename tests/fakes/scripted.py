"""A scripted, instant policy: picks an admissible action from the last observation block and
writes a valid skill JSON when asked to extract (in the format the extractor prompt asks for:
the reference prompt is recognised by its trajectory marker). Deterministic (choices hash the
prompt). `SKILLS` holds a good, a bad and a Chinese skill of each format.

`reply_text(prompt)` is the script; `sample_reply` turns any reply text into what a sampling
server returns (ids, log-probs, finish reason) honouring stop strings and `max_new_tokens`;
`ScriptedPolicy` is the in-process `PolicyClient` built from both.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evolving_rl.clients.policy import FinishReason, Generation, SamplingParams
from tests.fakes.tokenizer import ByteChatTokenizer

Responder = Callable[[str], str]

EXTRACTOR_MARKER = "Trajectory:"  # in the extractor prompt of both formats
REFERENCE_MARKER = "<<<BEGIN_TRAJECTORY>>>"  # only in the reference one
_ACTION_LINE = re.compile(r"^\d+\. (.+)$")

COMPACT_SKILL = {
    "name": "Find the object, then finish the task",
    "applicable_when": "A household task asks to move or use an object.",
    "steps": ["Go to the likely receptacle.", "Take the object.", "Go to the target and use it."],
    "pitfalls": ["Do not repeat an action that did nothing."],
}
REFERENCE_SKILL = {
    "name": "find-the-object-then-finish",
    "description": "Moves an object to a target; use it when a household task names both.",
    "metadata": {"source_task_type": "pick_and_place", "success_signal": "success",
                 "abstraction_level": "medium", "skill_category": "object placement"},
    "skill_overview": ["Find the object, take it, bring it to the target."],
    "when_to_use": ["The task asks to put an object somewhere."],
    "inputs_to_identify": ["the object", "the target receptacle"],
    "workflow": [{"step": 1, "goal": "Find the object", "action": "Go to the likely receptacle.",
                  "tools_or_strategy": "Open closed receptacles.",
                  "completion_condition": "The object is visible."},
                 {"step": 2, "goal": "Finish", "action": "Take it and put it on the target.",
                  "tools_or_strategy": "", "completion_condition": ""}],
    "decision_rules": ["If the object is not there, try the next receptacle."],
    "error_handling": [{"error": "Nothing happens", "cause": "The action is not admissible.",
                        "response": "Pick an action from the list."}],
    "output_requirements": ["The object ends on the target."],
}


@dataclass(frozen=True)
class SkillSet:
    """Skill JSON objects of one format: the solver wins with `good` (by its name) only."""

    valid: dict[str, Any]
    good: dict[str, Any]
    bad: dict[str, Any]
    chinese: dict[str, Any]  # fails the language audit


def _skill_set(valid: dict[str, Any], chinese: dict[str, Any]) -> SkillSet:
    return SkillSet(valid, {**valid, "name": "Take the mug"}, {**valid, "name": "Wander around"},
                    {**valid, "name": "找到杯子", **chinese})


SKILLS = {
    "reference": _skill_set(REFERENCE_SKILL, {"when_to_use": ["走到桌子旁边"]}),
    "compact": _skill_set(COMPACT_SKILL, {"steps": ["走到桌子旁边"]}),
}
GOOD_SKILL, BAD_SKILL, CHINESE_SKILL = (SKILLS["reference"].good, SKILLS["reference"].bad,
                                        SKILLS["reference"].chinese)


def skill_responder(outputs: Sequence[str], solver: Responder | None = None) -> Responder:
    """Extractor answers cycle through `outputs`. The default solver sends the toy game's
    winning command iff its skill card is a `good` skill's, else a wandering command."""

    cycle = itertools.cycle(outputs)

    def respond(prompt: str) -> str:
        if EXTRACTOR_MARKER in prompt:
            return next(cycle)
        if solver is not None:
            return solver(prompt)
        action = "take mug 1 from desk 1" if "Skill: Take the mug" in prompt else "go to shelf 1"
        return f"<reasoning>ok</reasoning><action>{action}</action>"

    return respond


def token_log_prob(token_id: int) -> float:
    """The log-prob the fakes report for a sampled id (tests check alignment against it)."""
    return -((token_id % 13) + 1) / 10.0


def admissible_from_prompt(prompt: str) -> list[str]:
    """The numbered actions of the last observation block in `prompt`."""
    block = prompt.rsplit("Admissible actions:\n", 1)
    if len(block) < 2:
        return []
    actions = []
    for line in block[1].splitlines():
        match = _ACTION_LINE.match(line)
        if not match:
            break
        actions.append(match.group(1))
    return actions


def reply_text(prompt: str) -> str:
    """The scripted reply to a decoded prompt."""
    if EXTRACTOR_MARKER in prompt:
        skill_format = "reference" if REFERENCE_MARKER in prompt else "compact"
        return json.dumps(SKILLS[skill_format].valid)
    actions = admissible_from_prompt(prompt)
    useful = [a for a in actions if not a.startswith(("look", "inventory", "examine"))]
    choices = useful or actions or ["look"]
    action = choices[zlib.crc32(prompt.encode("utf-8")) % len(choices)]
    return f"<reasoning>Try something useful.</reasoning><action>{action}</action>"


def sample_reply(text: str, sampling: SamplingParams,
                 tokenizer: ByteChatTokenizer) -> tuple[list[int], FinishReason]:
    """Ids of `text` cut after the first stop string or at `max_new_tokens`."""
    stopped = False
    for stop in sampling.stop:
        at = text.find(stop)
        if at != -1:
            text, stopped = text[: at + len(stop)], True
            break
    ids = tokenizer.encode(text) + ([] if stopped else [tokenizer.eos_token_id])
    if len(ids) > sampling.max_new_tokens:
        return ids[: sampling.max_new_tokens], FinishReason.LENGTH
    return ids, FinishReason.STOP


class ScriptedPolicy:
    """In-process `PolicyClient` answering with `responder` (the script by default)."""

    def __init__(self, tokenizer: ByteChatTokenizer, responder: Responder = reply_text,
                 teacher: Callable[[str, str], float] | None = None) -> None:
        self.tokenizer = tokenizer
        self.responder = responder
        self.teacher = teacher or teacher_gain
        self.calls = 0
        self.score_calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.calls += 1
        text = self.responder(self.tokenizer.decode(prompt_ids))
        ids, finish = sample_reply(text, sampling, self.tokenizer)
        return Generation(tuple(ids), tuple(token_log_prob(i) for i in ids), finish)

    async def score(self, token_ids: list[int], start: int,
                    temperature: float = 1.0) -> list[float]:
        """The sampled log-probs, each raised by `self.teacher(context, continuation)`: what a
        teacher test can tell apart (`teacher_gain` by default)."""
        self.score_calls += 1
        gain = self.teacher(self.tokenizer.decode(token_ids[:start]),
                            self.tokenizer.decode(token_ids[start:]))
        return [token_log_prob(i) + gain for i in token_ids[start:]]


def teacher_gain(context: str, continuation: str) -> float:
    """0.05 when `context` holds a skill card (the scripted teacher's default)."""
    return 0.05 if "Skill" in context else 0.0


class ActsAtCall:
    """A `PolicyClient` wrapper that runs `action()` (in a thread) just before its `n`-th call:
    how contract tests stop or kill an env server mid-rollout."""

    def __init__(self, inner: Any, n: int, action: Callable[[], object]) -> None:
        self.inner, self.n, self.action, self.calls = inner, n, action, 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.calls += 1
        if self.calls == self.n:
            await asyncio.to_thread(self.action)
        return await self.inner.generate(prompt_ids, sampling)
