"""Tests for evolving_rl.core.skill with the compact format: parsing nasty model outputs (the
object search is shared with the reference format), validation, card, schema. The reference
format and the ranking of several objects: tests/core/test_skill_reference.py."""

import json
import time

import pytest

from evolving_rl.core.skill import ParseReason, Skill, SkillFormat, render_skill_card
from evolving_rl.core.skill import parse_skill as parse_in_format
from evolving_rl.core.skill import validate_skill as validate_in_format
from evolving_rl.core.skill_compact import (
    MAX_ITEM_CHARS,
    MAX_NAME_CHARS,
    MAX_PITFALLS,
    MAX_STEPS,
    skill_schema_text,
)


def parse_skill(text):
    return parse_in_format(text, SkillFormat.COMPACT)


def validate_skill(obj):
    return validate_in_format(obj, SkillFormat.COMPACT)


GOOD = {
    "name": "Heat then place",
    "applicable_when": "The task asks to heat an object and put it somewhere.",
    "steps": ["Find the object.", "Take it.", "Heat it with the microwave.", "Put it down."],
    "pitfalls": ["Do not open the microwave twice."],
}
GOOD_JSON = json.dumps(GOOD)
GOOD_SKILL = Skill(
    name="Heat then place",
    applicable_when="The task asks to heat an object and put it somewhere.",
    steps=("Find the object.", "Take it.", "Heat it with the microwave.", "Put it down."),
    pitfalls=("Do not open the microwave twice.",),
)


def with_fields(**changes):
    obj = dict(GOOD)
    for key, value in changes.items():
        if value is ...:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj)


def assert_good(text):
    result = parse_skill(text)
    assert result.ok, result.reason
    assert result.reason == "ok"
    assert result.kind is ParseReason.OK
    assert result.skill == GOOD_SKILL


def assert_fails(text, reason):
    result = parse_skill(text)
    assert not result.ok
    assert result.skill is None
    assert result.reason == reason


# --- where the JSON is -------------------------------------------------------------------------


def test_direct_json():
    assert_good(GOOD_JSON)


def test_direct_json_with_surrounding_whitespace():
    assert_good("\n\n  " + GOOD_JSON + "  \n")


def test_fenced_json_block():
    assert_good(f"Here is the skill:\n```json\n{GOOD_JSON}\n```\nHope it helps.")


def test_fenced_block_without_language_tag():
    assert_good(f"```\n{GOOD_JSON}\n```")


def test_fenced_block_inline_tag_no_newline():
    assert_good(f"```json{GOOD_JSON}```")


def test_fenced_block_upper_case_tag():
    assert_good(f"```JSON\n{GOOD_JSON}\n```")


def test_prose_before_json():
    assert_good(f"Let me think about what worked. The agent heated the mug. {GOOD_JSON}")


def test_json_followed_by_trailing_prose():
    assert_good(f"{GOOD_JSON}\n\nThis skill generalises to other heating tasks.")


def test_json_followed_by_prose_with_stray_braces():
    assert_good(f"{GOOD_JSON} and then {{ maybe }} something }} else {{")


def test_prose_with_braces_before_json():
    assert_good(f"Use {{placeholders}} like {{this}}. Skill: {GOOD_JSON}")


def test_prose_with_unbalanced_quote_and_brace_before_json():
    assert_good(f'I said {{"oops and never closed. {GOOD_JSON}')


def test_unclosed_fence_falls_back_to_object_search():
    assert_good(f"```json\n{GOOD_JSON}\n")


def test_fenced_non_skill_then_object_in_prose():
    text = f'```json\n{{"thought": "x"}}\n```\nFinal: {GOOD_JSON}'
    assert_good(text)


def test_one_key_wrapper_is_unwrapped():
    assert_good(json.dumps({"skill": GOOD}))


def test_braces_inside_strings_do_not_count():
    obj = dict(GOOD, name="Use {x} and }{ braces", steps=["a } b", "{{ c"])
    result = parse_skill("prefix " + json.dumps(obj) + " suffix }")
    assert result.ok
    assert result.skill.name == "Use {x} and }{ braces"
    assert result.skill.steps == ("a } b", "{{ c")


def test_escaped_quotes_inside_strings():
    raw = (
        'Skill: {"name": "Say \\"hi\\" {", "applicable_when": "a \\\\ b \\"}\\"", '
        '"steps": ["type \\"go\\""], "pitfalls": []} trailing'
    )
    result = parse_skill(raw)
    assert result.ok, result.reason
    assert result.skill.name == 'Say "hi" {'
    assert result.skill.applicable_when == 'a \\ b "}"'
    assert result.skill.steps == ('type "go"',)


def test_largest_valid_object_wins():
    small = dict(GOOD, name="Small", steps=["one"])
    text = f"Example: {json.dumps(small)}\nReal: {json.dumps(GOOD)}"
    assert parse_skill(text).skill.name == GOOD_SKILL.name
    text_rev = f"Real: {json.dumps(GOOD)}\nExample: {json.dumps(small)}"
    assert parse_skill(text_rev).skill.name == GOOD_SKILL.name


def test_valid_skill_found_after_larger_invalid_object():
    big = {"notes": "x" * 500, "more": list(range(50))}
    result = parse_skill(f"{json.dumps(big)} then {GOOD_JSON}")
    assert result.ok
    assert result.skill == GOOD_SKILL


def test_skill_nested_inside_non_json_wrapper():
    assert_good(f"{{note: 'not json', payload: {GOOD_JSON}}}")


def test_skill_as_list_element():
    assert_good(json.dumps([GOOD]))


# --- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_empty_output(text):
    assert_fails(text, "empty_output")


def test_no_json_object():
    assert_fails("I could not come up with a skill.", "no_json_object")


def test_json_array_of_strings_is_no_object():
    assert_fails('["a", "b"]', "no_json_object")


@pytest.mark.parametrize("cut", [1, 10, len(GOOD_JSON) // 2, len(GOOD_JSON) - 1])
def test_truncated_json(cut):
    assert_fails(GOOD_JSON[:cut], "invalid_json")


def test_truncated_json_in_fence():
    assert_fails(f"```json\n{GOOD_JSON[:40]}", "invalid_json")


def test_single_quoted_pseudo_json_is_invalid():
    assert_fails("{'name': 'x', 'steps': ['a']}", "invalid_json")


@pytest.mark.parametrize("field", ["name", "applicable_when", "steps"])
def test_missing_required_field(field):
    assert_fails(with_fields(**{field: ...}), f"missing_field:{field}")


def test_missing_pitfalls_are_none():
    """Optional, like an empty list (small models often close the object after the steps)."""
    result = parse_skill(with_fields(pitfalls=...))
    assert result.ok and result.skill.pitfalls == ()


def test_missing_summary_is_fine():
    assert parse_skill(GOOD_JSON).skill.summary is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", 3),
        ("name", None),
        ("name", ["x"]),
        ("applicable_when", {"a": 1}),
        ("steps", "do it"),
        ("steps", ["ok", 2]),
        ("steps", None),
        ("pitfalls", "none"),
        ("pitfalls", None),
        ("pitfalls", [None]),
        ("summary", 5),
    ],
)
def test_wrong_type(field, value):
    assert_fails(with_fields(**{field: value}), f"wrong_type:{field}")


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", ""), ("name", "   "), ("applicable_when", "\n"), ("steps", []), ("steps", [" ", ""])],
)
def test_empty_field(field, value):
    assert_fails(with_fields(**{field: value}), f"empty_field:{field}")


def test_empty_pitfalls_allowed_and_blank_items_dropped():
    result = parse_skill(with_fields(pitfalls=[], steps=["a", "  ", "b"]))
    assert result.ok
    assert result.skill.pitfalls == ()
    assert result.skill.steps == ("a", "b")


def test_blank_summary_becomes_none():
    assert parse_skill(with_fields(summary="   ")).skill.summary is None


def test_null_summary_is_absent():
    assert parse_skill(with_fields(summary=None)).skill.summary is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "n" * (MAX_NAME_CHARS + 1)),
        ("applicable_when", "w" * 1001),
        ("steps", [f"s{i}" for i in range(MAX_STEPS + 1)]),
        ("steps", ["x" * (MAX_ITEM_CHARS + 1)]),
        ("pitfalls", [f"p{i}" for i in range(MAX_PITFALLS + 1)]),
        ("summary", "s" * 1001),
    ],
)
def test_too_long(field, value):
    result = parse_skill(with_fields(**{field: value}))
    assert result.reason == f"too_long:{field}"
    assert result.kind is ParseReason.TOO_LONG


def test_limits_are_inclusive():
    result = parse_skill(
        with_fields(
            name="n" * MAX_NAME_CHARS,
            steps=["x" * MAX_ITEM_CHARS] * MAX_STEPS,
            pitfalls=["p"] * MAX_PITFALLS,
        )
    )
    assert result.ok


def test_failure_reason_comes_from_the_chosen_object():
    text = json.dumps({"name": "x", "applicable_when": "y", "steps": "not a list"})
    assert_fails(text, "wrong_type:steps")
    # The object with more compact keys is chosen and only it is validated: a valid object
    # with fewer keys later in the text does not rescue it (the reference's rule).
    broken = json.dumps({**GOOD, "steps": 3})
    fewer = json.dumps({"name": "x", "applicable_when": "y", "steps": ["a"]})
    assert_fails(f"{broken}\n{fewer}", "wrong_type:steps")


def test_kind_strips_field():
    result = parse_skill(with_fields(steps=...))
    assert result.kind is ParseReason.MISSING_FIELD
    assert result.kind == "missing_field"


def test_whitespace_is_normalised():
    result = parse_skill(with_fields(name="  Heat\n then\t place ", steps=[" a \n b "]))
    assert result.skill.name == "Heat then place"
    assert result.skill.steps == ("a b",)


def test_extra_fields_ignored():
    assert parse_skill(with_fields(confidence=0.9)).ok


def test_validate_skill_directly():
    assert validate_skill(dict(GOOD)).skill == GOOD_SKILL
    assert validate_skill({}).reason == "missing_field:name"


# --- robustness and speed ----------------------------------------------------------------------


def _timed(text):
    start = time.perf_counter()
    result = parse_skill(text)
    return result, time.perf_counter() - start


@pytest.mark.parametrize(
    "text",
    [
        "the skill is to heat the mug. " * 1700,
        "{" * 50_000,
        "}" * 50_000,
        '{"a": ' * 10_000,
        '{"k": "' + "x{" * 25_000,
        "{}" * 25_000,
        '{"a": 1} ' * 5_500,
        "```" * 17_000,
        "```json\n{" * 5_000,
        '"\\' * 25_000,
    ],
)
def test_50kb_inputs_are_fast_and_fail_cleanly(text):
    assert len(text) >= 45_000
    result, seconds = _timed(text)
    assert seconds < 1.0
    assert not result.ok


def test_50kb_prose_with_skill_at_the_end():
    text = "thinking about the mug and the microwave. " * 1200 + GOOD_JSON
    result, seconds = _timed(text)
    assert seconds < 1.0
    assert result.skill == GOOD_SKILL


def test_50kb_of_repeated_skill_copies():
    text = (GOOD_JSON + "\n") * (50_000 // len(GOOD_JSON))
    result, seconds = _timed(text)
    assert seconds < 1.0
    assert result.skill == GOOD_SKILL


# --- rendering and schema ----------------------------------------------------------------------


def test_render_card_exact():
    skill = Skill(
        name="Heat",
        applicable_when="When heating.",
        steps=("a", "b"),
        pitfalls=("p",),
        summary="Heat it.",
    )
    assert render_skill_card(skill) == (
        "### Skill: Heat\n\nHeat it.\n\n**When to use:** When heating.\n\n"
        "**Steps:**\n1. a\n2. b\n\n**Pitfalls:**\n- p"
    )


def test_render_card_without_pitfalls_or_summary():
    card = render_skill_card(Skill(name="N", applicable_when="W", steps=("only",)))
    assert card == "### Skill: N\n\n**When to use:** W\n\n**Steps:**\n1. only"
    assert "Pitfalls" not in card


def test_to_dict_round_trip():
    skill = Skill("N", "W", ("a", "b"), ("p",), "S")
    assert parse_skill(json.dumps(skill.to_dict())).skill == skill
    assert "summary" not in GOOD_SKILL.to_dict()


def test_texts_lists_every_field_in_order():
    assert Skill("N", "W", ("a", "b"), ("p",), "S").texts() == ("N", "W", "a", "b", "p", "S")
    assert Skill("N", "W", ("a",)).texts() == ("N", "W", "a")


def test_skill_is_frozen():
    with pytest.raises(AttributeError):
        GOOD_SKILL.name = "x"


def test_schema_text_names_fields_and_limits():
    text = skill_schema_text()
    for field in ("name", "applicable_when", "steps", "pitfalls", "summary"):
        assert f'"{field}"' in text
    assert str(MAX_STEPS) in text and str(MAX_NAME_CHARS) in text


def test_schema_example_has_the_fields_the_validator_wants():
    text = skill_schema_text()
    example = json.loads(text[text.index("{") :])
    assert validate_skill(example).ok
