"""Tests for the reference skill format (core.skill_reference) and for the choice among several
JSON objects (core.skill_search), in both formats. Upstream rules: Fanzy27/Evolving-RL
src/alfworld/prompts.py (`_extract_json_object` :303-408, `skill_json_to_markdown` :411-521)."""

import json
import time

import pytest

from evolving_rl.core.skill import (
    ParseReason,
    ReferenceSkill,
    SkillFormat,
    parse_skill,
    render_skill_card,
    validate_skill,
)
from evolving_rl.core.skill_reference import (
    MAX_ITEMS,
    MAX_META_CHARS,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    ErrorCase,
    SkillMetadata,
    WorkflowStep,
)

REF = SkillFormat.REFERENCE
FULL = {
    "name": "heat-then-place",
    "description": "Heats an object and places it; use it when a task says to heat something.",
    "metadata": {"source_task_type": "pick_heat_then_place", "success_signal": "success",
                 "abstraction_level": "medium", "skill_category": "appliance use"},
    "skill_overview": ["Find the object.", "Heat it, then place it."],
    "when_to_use": ["The task asks to heat an object."],
    "when_not_to_use": ["The object is already hot."],
    "inputs_to_identify": ["the object", "the target"],
    "workflow": [
        {"step": 1, "goal": "Find", "action": "Go to the countertop.",
         "tools_or_strategy": "Check the likely places first.",
         "completion_condition": "The object is in view."},
        {"step": 2, "goal": "Heat", "action": "Use the microwave.", "tools_or_strategy": "",
         "completion_condition": "The object is hot."},
    ],
    "decision_rules": ["If the microwave is closed, open it."],
    "error_handling": [{"error": "Nothing happens", "cause": "The door is closed.",
                        "response": "Open it first."}],
    "output_requirements": ["The hot object is on the target."],
}
FULL_CARD = (
    "# Skill: heat-then-place\n"
    "\n"
    "Heats an object and places it; use it when a task says to heat something.\n"
    "\n"
    "**Category**: appliance use | **Source**: pick_heat_then_place | **Level**: medium | "
    "**Signal**: success\n"
    "\n"
    "## Overview\n"
    "- Find the object.\n"
    "- Heat it, then place it.\n"
    "\n"
    "## When to Use\n"
    "- The task asks to heat an object.\n"
    "\n"
    "## When NOT to Use\n"
    "- The object is already hot.\n"
    "\n"
    "## Inputs to Identify\n"
    "- the object\n"
    "- the target\n"
    "\n"
    "## Workflow\n"
    "1. **Find**: Go to the countertop.\n"
    "   - Strategy: Check the likely places first.\n"
    "   - Done when: The object is in view.\n"
    "2. **Heat**: Use the microwave.\n"
    "   - Done when: The object is hot.\n"
    "\n"
    "## Decision Rules\n"
    "- If the microwave is closed, open it.\n"
    "\n"
    "## Error Handling\n"
    "- **Nothing happens**: The door is closed. → Open it first.\n"
    "\n"
    "## Output Requirements\n"
    "- The hot object is on the target."
)


def parse(obj_or_text):
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text)
    return parse_skill(text, REF)


def with_fields(**changes):
    obj = dict(FULL)
    for key, value in changes.items():
        if value is ...:
            del obj[key]
        else:
            obj[key] = value
    return obj


# --- fields --------------------------------------------------------------------------------------


def test_full_skill_parses_into_typed_fields():
    result = parse(FULL)
    assert result.ok and result.reason == "ok" and result.kind is ParseReason.OK
    skill = result.skill
    assert isinstance(skill, ReferenceSkill)
    assert skill.metadata == SkillMetadata("pick_heat_then_place", "success", "medium",
                                           "appliance use")
    assert skill.workflow[1] == WorkflowStep("2", "Heat", "Use the microwave.", "",
                                             "The object is hot.")
    assert skill.error_handling == (ErrorCase("Nothing happens", "The door is closed.",
                                              "Open it first."),)
    assert skill.when_not_to_use == ("The object is already hot.",)


@pytest.mark.parametrize("field", ["name", "description"])
def test_required_fields(field):
    assert parse(with_fields(**{field: ...})).reason == f"missing_field:{field}"
    assert parse(with_fields(**{field: "  \n"})).reason == f"empty_field:{field}"
    assert parse(with_fields(**{field: None})).reason == f"wrong_type:{field}"
    assert parse(with_fields(**{field: ["x"]})).reason == f"wrong_type:{field}"


def test_name_and_description_are_enough_and_kebab_case_is_not_enforced():
    result = parse({"name": "Take The Mug", "description": "Take it."})
    assert result.ok and result.skill == ReferenceSkill("Take The Mug", "Take it.")
    assert render_skill_card(result.skill) == "# Skill: Take The Mug\n\nTake it."


def test_empty_values_are_allowed_everywhere_else():
    empty = {"name": "n", "description": "d", "metadata": {}, "workflow": [],
             "skill_overview": [], "when_to_use": None, "inputs_to_identify": [""],
             "decision_rules": ["  "], "error_handling": [{"error": "", "cause": " "}],
             "output_requirements": [], "when_not_to_use": None}
    result = parse(empty)
    assert result.ok and result.skill == ReferenceSkill("n", "d")
    meta = parse(with_fields(metadata={"skill_category": "", "success_signal": None}))
    assert meta.ok and meta.skill.metadata == SkillMetadata()


def test_blank_items_and_blank_entries_are_dropped():
    result = parse(with_fields(
        skill_overview=["a", " ", "b"],
        workflow=[{"step": 1, "goal": " ", "action": ""}, {"step": 2, "action": "go"}]))
    assert result.skill.skill_overview == ("a", "b")
    assert result.skill.workflow == (WorkflowStep("2", action="go"),)


def test_strings_are_stripped_and_inner_whitespace_is_kept():
    result = parse(with_fields(name="  heat \n it ", decision_rules=[" if a,\n  then b "]))
    assert result.skill.name == "heat \n it"
    assert result.skill.decision_rules == ("if a,\n  then b",)


@pytest.mark.parametrize(("value", "shown"), [(3, "3"), ("4", "4"), (None, "?"), ("", "?")])
def test_step_numbers_are_the_models(value, shown):
    step = {"goal": "g", "action": "a"} if value is None else {"step": value, "goal": "g",
                                                                "action": "a"}
    result = parse({"name": "n", "description": "d", "workflow": [step]})
    assert render_skill_card(result.skill).endswith(f"## Workflow\n{shown}. **g**: a")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workflow", ["Go to the countertop."]),  # the reference's renderer raises on this
        ("workflow", [{"goal": 5}]),
        ("workflow", [{"step": True, "goal": "g"}]),
        ("workflow", [{"step": 1.5, "goal": "g"}]),
        ("workflow", {"step": 1}),
        ("error_handling", ["Nothing happens"]),
        ("error_handling", [{"error": ["x"]}]),
        ("skill_overview", "Find the object."),
        ("when_to_use", ["ok", 2]),
        ("when_not_to_use", [None]),
        ("inputs_to_identify", {"a": 1}),
        ("decision_rules", [["nested"]]),
        ("output_requirements", 7),
        ("metadata", "alfworld"),
        ("metadata", ["x"]),
    ],
)
def test_wrong_types(field, value):
    result = parse(with_fields(**{field: value}))
    assert not result.ok and result.skill is None
    assert result.reason == f"wrong_type:{field}"


def test_metadata_value_of_the_wrong_type():
    assert parse(with_fields(metadata={"skill_category": 3})).reason == "wrong_type:metadata"


def test_unknown_keys_are_ignored():
    assert parse(with_fields(confidence=0.9, metadata={"extra": [1], "skill_category": "c"})).ok


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "n" * (MAX_NAME_CHARS + 1)),
        ("description", "d" * (MAX_TEXT_CHARS + 1)),
        ("skill_overview", ["x" * (MAX_TEXT_CHARS + 1)]),
        ("decision_rules", [f"r{i}" for i in range(MAX_ITEMS + 1)]),
        ("workflow", [{"step": i, "goal": "g"} for i in range(MAX_ITEMS + 1)]),
        ("error_handling", [{"error": "e" * (MAX_TEXT_CHARS + 1)}]),
        ("metadata", {"skill_category": "c" * (MAX_META_CHARS + 1)}),
    ],
)
def test_too_long(field, value):
    result = parse(with_fields(**{field: value}))
    assert result.reason == f"too_long:{field}" and result.kind is ParseReason.TOO_LONG


def test_limits_are_inclusive():
    assert parse(with_fields(
        name="n" * MAX_NAME_CHARS, description="d" * MAX_TEXT_CHARS,
        decision_rules=["r" * MAX_TEXT_CHARS] * MAX_ITEMS,
        workflow=[{"step": i, "goal": "g"} for i in range(MAX_ITEMS)],
        metadata={"skill_category": "c" * MAX_META_CHARS})).ok


def test_one_key_wrapper_and_fenced_block():
    assert parse({"skill": FULL}).skill == parse(FULL).skill
    assert parse(f"Analysis: it worked.\n```json\n{json.dumps(FULL)}\n```").skill == (
        parse(FULL).skill)


def test_to_dict_round_trip():
    skill = parse(FULL).skill
    assert validate_skill(skill.to_dict(), REF).skill == skill
    assert validate_skill(json.loads(json.dumps(skill.to_dict())), "reference").skill == skill


# --- the card ------------------------------------------------------------------------------------


def test_card_in_the_reference_order():
    assert render_skill_card(parse(FULL).skill) == FULL_CARD


def test_card_omits_empty_sections_and_absent_metadata():
    skill = parse({"name": "n", "description": "d",
                   "metadata": {"abstraction_level": "low", "success_signal": "failure"},
                   "decision_rules": [], "error_handling": [{"error": "e", "response": "r"}],
                   "output_requirements": ["o"]}).skill
    assert render_skill_card(skill) == (
        "# Skill: n\n\nd\n\n**Level**: low | **Signal**: failure\n\n"
        "## Error Handling\n- **e**:  → r\n\n## Output Requirements\n- o")


# --- the choice among several objects (both formats) ---------------------------------------------

COMPACT = {"name": "c", "applicable_when": "w", "steps": ["s"], "pitfalls": []}
BASE = {SkillFormat.REFERENCE: {"name": "r", "description": "d"},
        SkillFormat.COMPACT: {"name": "c", "applicable_when": "w", "steps": ["s"]}}
EXTRA_KEY = {SkillFormat.REFERENCE: {"decision_rules": []}, SkillFormat.COMPACT: {"pitfalls": []}}


@pytest.mark.parametrize("fmt", list(SkillFormat))
def test_more_schema_keys_win_over_longer_and_later(fmt):
    more = {**BASE[fmt], **EXTRA_KEY[fmt], "name": "more"}
    longer = {**BASE[fmt], "name": "fewer-keys-" + "x" * 200, "unrelated": list(range(50))}
    for text in (f"{json.dumps(more)}\n{json.dumps(longer)}",
                 f"{json.dumps(longer)}\n{json.dumps(more)}"):
        assert parse_skill(text, fmt).skill.name == "more"


@pytest.mark.parametrize("fmt", list(SkillFormat))
def test_key_tie_goes_to_the_longer_raw_text(fmt):
    long_one = json.dumps({**BASE[fmt], "name": "long-name"})
    short_one = json.dumps({**BASE[fmt], "name": "short"})
    assert parse_skill(f"{long_one}\n{short_one}", fmt).skill.name == "long-name"
    assert parse_skill(f"{short_one}\n{long_one}", fmt).skill.name == "long-name"


@pytest.mark.parametrize("fmt", list(SkillFormat))
def test_key_and_length_tie_goes_to_the_later_object(fmt):
    first, second = (json.dumps({**BASE[fmt], "name": name}) for name in ("aaa", "bbb"))
    assert len(first) == len(second)
    assert parse_skill(f"Draft: {first}\nFinal: {second}", fmt).skill.name == "bbb"
    assert parse_skill(f"```json\n{first}\n```\n{second}", fmt).skill.name == "bbb"


@pytest.mark.parametrize("fmt", list(SkillFormat))
def test_fenced_and_prose_objects_compete_and_wrappers_count_inner_keys(fmt):
    fenced = f"```json\n{json.dumps({**BASE[fmt], 'name': 'fenced-' + 'x' * 100})}\n```"
    wrapped = json.dumps({"skill": {**BASE[fmt], **EXTRA_KEY[fmt], "name": "wrapped"}})
    assert parse_skill(f"{fenced}\nor {wrapped}", fmt).skill.name == "wrapped"


def test_each_format_ranks_by_its_own_keys():
    reference = {"name": "ref", "description": "d", "metadata": {}, "workflow": []}
    compact = {**COMPACT, "name": "compact"}
    text = f"{json.dumps(reference)}\n{json.dumps(compact)}"
    assert parse_skill(text, SkillFormat.REFERENCE).skill.name == "ref"
    assert parse_skill(text, SkillFormat.COMPACT).skill.name == "compact"


def test_when_not_to_use_is_not_a_ranking_key():
    """The ALFWorld reference's key set (prompts.py:317-328) lacks it: a tie, so the longer."""
    plain = json.dumps({"name": "plain-" + "x" * 60, "description": "d"})
    extra = json.dumps({"name": "extra", "description": "d", "when_not_to_use": []})
    assert len(plain) > len(extra)
    assert parse(f"{extra}\n{plain}").skill.name.startswith("plain-")


def test_the_chosen_object_alone_is_validated():
    broken = {**FULL, "workflow": ["not an object"]}
    assert parse(f"{json.dumps(broken)}\n{json.dumps({'name': 'n', 'description': 'd'})}"
                 ).reason == "wrong_type:workflow"


def test_no_object_reasons():
    assert parse("").reason == "empty_output"
    assert parse("no skill here").reason == "no_json_object"
    assert parse(json.dumps(FULL)[:100]).reason == "invalid_json"


@pytest.mark.parametrize("text", ["{" * 50_000, '{"a": 1} ' * 5_500, "```json\n{" * 5_000,
                                  json.dumps(FULL) * 40])
def test_50kb_inputs_are_fast(text):
    start = time.perf_counter()
    parse(text)
    assert time.perf_counter() - start < 1.0
