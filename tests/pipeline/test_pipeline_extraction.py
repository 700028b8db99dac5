"""Skill extraction with fakes, in both skill formats: the reply prefix is prompt-side and the
parser sees it; the audit reads the rendered card; the ALFWorld extractor prompts (the reference
wording, and a schema example in each prompt that parses and validates); the extractor is told
whether its source episode was won or lost, by every environment, in training and evaluation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evolving_rl.config import load_config, parse_config
from evolving_rl.core.audit import AuditResult
from evolving_rl.core.skill import SkillFormat, render_skill_card, validate_skill
from evolving_rl.domains.alfworld import AlfworldAdapter
from evolving_rl.domains.base import TaskSpec, Turn
from evolving_rl.pipeline import extraction as extraction_module
from evolving_rl.pipeline.context import make_adapter
from evolving_rl.pipeline.evaluation import EvalPlan, evaluate_cases
from evolving_rl.pipeline.extraction import extract_skills
from evolving_rl.pipeline.rollout import run_training_rollout
from evolving_rl.pipeline.timing import IOClock
from tests.fakes.context import fake_context, small_config, toy_rows, toy_task
from tests.fakes.scripted import EXTRACTOR_MARKER, SKILLS, ScriptedPolicy, reply_text
from tests.fakes.tokenizer import ByteChatTokenizer

ROOT = Path(__file__).resolve().parents[2]
TOK = ByteChatTokenizer()
PREFIX = '{"name": "'
TAILS = {
    "compact": ('Find then place", "applicable_when": "a task asks to put an object somewhere", '
                '"steps": ["go to where the object is", "take it", "put it in place"], '
                '"pitfalls": []}'),
    "reference": ('Find then place", "description": "Puts an object somewhere.", '
                  '"workflow": [{"step": 1, "goal": "find", "action": "go to it"}]}'),
}
TURNS = [Turn("You are in a room.", "<reasoning>look first</reasoning><action>look</action>",
              "look", "ok", ("look", "go to desk 1")),
         Turn("You see a mug.", "<action>take mug 1</action>", "take mug 1", "ok",
              ("take mug 1",))]
# What the extractor prompt of each skill format says of a won and of a lost source episode
OUTCOME = {"reference": {True: "True Environment Success: True",
                         False: "True Environment Success: False"},
           "compact": {True: "Outcome: The agent SUCCEEDED.", False: "Outcome: The agent FAILED."}}


def _extract(ctx, n: int = 2):
    sampling = ctx.sampling(ctx.cfg.sampling.extractor, solver=False)
    return asyncio.run(extract_skills(ctx, IOClock(), toy_task(ctx), TURNS, False, n, sampling))


@pytest.mark.parametrize("fmt", sorted(TAILS))
def test_extractor_reply_prefix_is_prompt_side_and_parsed(tmp_path, fmt):
    tail = TAILS[fmt]
    ctx = fake_context(tmp_path, small_config(extractor_reply_prefix=PREFIX, skill_format=fmt),
                       policy=ScriptedPolicy(TOK, lambda _: tail))
    extractions = _extract(ctx)
    assert len(extractions) == 2
    for extraction in extractions:
        assert extraction.usable and extraction.parse.skill.name == "Find then place"
        assert extraction.skill_format == fmt
        assert extraction.prompt_ids[-len(TOK.encode(PREFIX)):] == TOK.encode(PREFIX)
        # Only the sampled ids (the tail, then the end-of-turn token) are the response.
        assert list(extraction.generation.token_ids) == [*TOK.encode(tail), TOK.eos_token_id]
        assert extraction.text == PREFIX + tail


@pytest.mark.parametrize("in_prompt", [True, False])
def test_extractor_reply_suffix_is_parser_side(tmp_path, in_prompt):
    """The skill canary's scaffold: the model writes one step's text; the prefix opens the JSON
    (shown to the model or not, `extractor_prefix_in_prompt`) and the suffix closes it for the
    parser only. The sampled ids stay the whole response."""
    prefix, suffix = '{"steps": ["', '"], "name": "answer", "applicable_when": "same family"}'
    ctx = fake_context(tmp_path, small_config(
        extractor_reply_prefix=prefix, extractor_prefix_in_prompt=in_prompt,
        extractor_reply_suffix=suffix, skill_format="compact"),
        policy=ScriptedPolicy(TOK, lambda _: "2"))
    (extraction,) = _extract(ctx, 1)
    assert extraction.text == f"{prefix}2{suffix}"
    assert extraction.usable and extraction.parse.skill.steps == ("2",)
    assert extraction.card.endswith("1. 2")
    assert list(extraction.generation.token_ids) == [*TOK.encode("2"), TOK.eos_token_id]
    shown = extraction.prompt_ids[-len(TOK.encode(prefix)):] == TOK.encode(prefix)
    assert shown == in_prompt


@pytest.mark.parametrize("fmt", sorted(SKILLS))
def test_the_audit_reads_the_rendered_card(tmp_path, fmt, monkeypatch):
    seen: list[str] = []

    def audit_text(text, config=None):
        seen.append(text)
        return AuditResult(True, None, "")

    monkeypatch.setattr(extraction_module, "audit_text", audit_text)
    skill = SKILLS[fmt].good
    ctx = fake_context(tmp_path, small_config(skill_format=fmt),
                       policy=ScriptedPolicy(TOK, lambda _: f"Analysis.\n{json.dumps(skill)}"))
    (extraction,) = _extract(ctx, 1)
    card = render_skill_card(validate_skill(skill, fmt).skill)
    assert extraction.card == card and seen == [card]
    assert card.startswith("# Skill: Take the mug" if fmt == "reference"
                           else "### Skill: Take the mug")


EXAMPLE_AFTER = {SkillFormat.REFERENCE: "Use exactly this JSON schema:\n\n",
                 SkillFormat.COMPACT: "Example:\n"}


def test_reference_prompt_is_one_user_message_in_the_papers_shape(tmp_path):
    task = toy_task(fake_context(tmp_path))
    for success in (True, False):
        (message,) = AlfworldAdapter().extractor_messages(task, TURNS, success,
                                                          SkillFormat.REFERENCE)
        text = message["content"]
        assert message["role"] == "user"
        assert text.startswith(f"Task: {task.question}\n\nAgent's Trajectory:\n"
                               "<<<BEGIN_TRAJECTORY>>>\n[Step 0]\nObservation: You are in a "
                               "room.\nAdmissible actions: ['look'\n 'go to desk 1']\n\n"
                               "<reasoning>look first</reasoning><action>look</action>"
                               "\n\n[Step 1]\nObservation: You see a mug.\n"
                               "Admissible actions: ['take mug 1']\n\n"
                               "<action>take mug 1</action>\n<<<END_TRAJECTORY>>>\n\n"
                               f"True Environment Success: {success}\n\n")
        for phrase in ("Use the following extraction guidance and output requirements:",
                       "Now use the example above to extract a reusable skill.",
                       "Use exactly this JSON schema:", "Field requirements:",
                       "Additional constraints:", "- the reusable patterns vs. one-off details"):
            assert phrase in text
        assert text.endswith("- the reusable patterns vs. one-off details\n")


@pytest.mark.parametrize("fmt", list(SkillFormat))
def test_prompt_schema_example_parses_and_validates(tmp_path, fmt):
    messages = AlfworldAdapter().extractor_messages(toy_task(fake_context(tmp_path)), TURNS,
                                                    True, fmt)
    prompt = messages[-1]["content"]
    start = prompt.index(EXAMPLE_AFTER[fmt]) + len(EXAMPLE_AFTER[fmt])
    example, _ = json.JSONDecoder().raw_decode(prompt, start)
    assert validate_skill(example, fmt).ok
    if fmt is SkillFormat.REFERENCE:
        assert set(example) == {"name", "description", "metadata", "skill_overview",
                                "when_to_use", "inputs_to_identify", "workflow",
                                "decision_rules", "error_handling", "output_requirements"}


@pytest.mark.parametrize(("profile", "fmt"), [("alfworld", "reference"), ("web", "reference"),
                                              ("local_cpu", "compact")])
def test_profiles_pick_their_skill_format(profile, fmt):
    assert load_config(ROOT / "configs" / f"{profile}.yaml").pipeline.skill_format == fmt


@pytest.mark.parametrize("fmt", sorted(SKILLS))
def test_solver_text_of_usable_and_unusable_skills(tmp_path, fmt):
    """What the solver reads (`pipeline.unusable_skills`): the reference shows an unparsed skill
    as written and an audit-failed one as its card; "skip" shows only usable skills."""
    good, chinese = json.dumps(SKILLS[fmt].good), json.dumps(SKILLS[fmt].chinese)
    replies = iter([good, chinese, "  not a skill at all \n"])
    ctx = fake_context(tmp_path, small_config(skill_format=fmt),
                       policy=ScriptedPolicy(TOK, lambda _: next(replies)))
    usable, audit_failed, unparsed = _extract(ctx, n=3)
    assert usable.usable and not audit_failed.usable and not unparsed.usable
    assert audit_failed.card is not None and not audit_failed.audit.ok
    for mode in ("as_written", "skip"):
        assert usable.solver_text(mode) == usable.card
    assert audit_failed.solver_text("as_written") == audit_failed.card
    assert unparsed.solver_text("as_written") == "not a skill at all"
    assert audit_failed.solver_text("skip") is None and unparsed.solver_text("skip") is None


def test_a_failed_generation_gives_the_solver_no_skill(tmp_path):
    class Failing(ScriptedPolicy):
        async def generate(self, prompt_ids, sampling):
            from evolving_rl.clients.policy import PolicyError

            raise PolicyError("down")

    ctx = fake_context(tmp_path, policy=Failing(TOK))
    (failed,) = _extract(ctx, n=1)
    assert failed.generation_failed
    assert failed.solver_text("as_written") is None and failed.solver_text("skip") is None


@pytest.mark.parametrize("environment", ["alfworld", "mind2web", "probe"])
@pytest.mark.parametrize("fmt", sorted(OUTCOME))
def test_every_environment_tells_the_extractor_won_or_lost(environment, fmt):
    """Fails when an adapter, `skill_prompt.reference_extractor_prompt` or
    `skill_prompt.compact_extractor_messages` says the episode succeeded whatever its flag."""
    adapter = make_adapter(parse_config({"environment": environment}), lenient=True)
    task = TaskSpec("t0", "put mug 0 on the desk.", "type0", "train")
    for success in (True, False):
        messages = adapter.extractor_messages(task, TURNS[:1], success, SkillFormat(fmt))
        text = "\n".join(message["content"] for message in messages)
        assert OUTCOME[fmt][success] in text and OUTCOME[fmt][not success] not in text


class _Prompts:
    """The scripted replies, keeping every extractor prompt; the solver wins the toy game in the
    task "put mug 0" only (its source episode is won, every other one lost)."""

    def __init__(self) -> None:
        self.extractor: list[str] = []

    def __call__(self, prompt: str) -> str:
        if EXTRACTOR_MARKER in prompt:
            self.extractor.append(prompt)
            return reply_text(prompt)
        action = "take mug 1 from desk 1" if "put mug 0" in prompt else "go to shelf 1"
        return f"<action>{action}</action>"


@pytest.mark.parametrize("phase", ["training", "evaluation"])
@pytest.mark.parametrize("fmt", sorted(OUTCOME))
def test_the_extractor_is_told_a_lost_source_episode_failed(tmp_path, phase, fmt):
    """t0's source episode is won and t1's lost (in evaluation, each is the other's retrieved
    task). Fails with `unit.source.success` replaced by True in `rollout._run_source` (training),
    `source.success` by True in `evaluation._attempt_card` (evaluation), or `success` by True in
    `extraction.extract_skills` or an adapter's `extractor_messages` (both phases)."""
    prompts = _Prompts()
    ctx = fake_context(tmp_path, small_config(skill_format=fmt, max_steps=2),
                       policy=ScriptedPolicy(TOK, prompts))
    if phase == "training":
        asyncio.run(run_training_rollout(ctx, toy_rows(2), rollout_id=1))
    else:
        asyncio.run(evaluate_cases(ctx, toy_rows(2), 1, EvalPlan(split="valid_unseen")))
    for mug, won in ((0, True), (1, False)):
        (prompt,) = {p for p in prompts.extractor if f"Task: put mug {mug} " in p}
        assert OUTCOME[fmt][won] in prompt and OUTCOME[fmt][not won] not in prompt
