"""The hand-written ALFWorld skills (protocol written_skill): the shipped file covers the six
task types, every skill validates against the reference schema and renders to the card the
loader returns, each card names the engine's command spellings of its type and stays short; a
corrupted file fails naming the task type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolving_rl.core.skill import SkillFormat, render_skill_card, validate_skill
from evolving_rl.domains.alfworld import AlfworldAdapter
from evolving_rl.domains.alfworld_written_skills import (
    TASK_TYPES,
    WrittenSkillError,
    default_path,
    load_written_skills,
)

# Commands of alfworld 0.4.2's grammar (alfred.twl2 templates) each type's card must name.
COMMANDS = {
    "pick_and_place_simple": ("go to", "open", "take", "move"),
    "look_at_obj_in_light": ("go to", "take", "use desklamp 1"),
    "pick_clean_then_place_in_recep": ("take", "clean", "with sinkbasin 1", "move"),
    "pick_heat_then_place_in_recep": ("take", "heat", "with microwave 1", "move"),
    "pick_cool_then_place_in_recep": ("take", "cool", "with fridge 1", "move"),
    "pick_two_obj_and_place": ("take", "move"),
}
MAX_CARD_CHARS = 900  # ~260 SmolLM2 tokens (the module docstring has the measured counts)


def _raw() -> dict:
    return json.loads(default_path().read_text(encoding="utf-8"))


def test_the_shipped_cards_cover_all_six_types_and_validate():
    assert set(TASK_TYPES) == set(COMMANDS) and len(TASK_TYPES) == 6
    cards = load_written_skills()
    assert set(cards) == set(TASK_TYPES)
    for task_type, skill in _raw().items():
        parsed = validate_skill(skill, SkillFormat.REFERENCE)
        assert parsed.ok, (task_type, parsed.reason)
        assert cards[task_type] == render_skill_card(parsed.skill)
        assert parsed.skill.metadata.source_task_type == task_type
        assert all(command in cards[task_type] for command in COMMANDS[task_type]), task_type
        assert len(cards[task_type]) <= MAX_CARD_CHARS
    assert AlfworldAdapter().written_skill_cards() == cards


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "skills.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(("breakage", "message"), [
    (lambda d: d["pick_cool_then_place_in_recep"].pop("name"),
     "'pick_cool_then_place_in_recep' is invalid .*name"),
    (lambda d: d["look_at_obj_in_light"].update(workflow="go to the lamp"),
     "'look_at_obj_in_light' is invalid .*workflow"),
    (lambda d: d.update(pick_two_obj_and_place=["not", "an object"]),
     "'pick_two_obj_and_place' is invalid"),
    (lambda d: d.pop("pick_heat_then_place_in_recep"), "missing.*pick_heat_then_place_in_recep"),
    (lambda d: d.update(pick_and_place_with_movable_recep={}),
     "unknown.*pick_and_place_with_movable_recep"),
])
def test_a_corrupted_file_fails_naming_the_task_type(tmp_path, breakage, message):
    data = _raw()
    breakage(data)
    with pytest.raises(WrittenSkillError, match=message):
        load_written_skills(_write(tmp_path, data))


def test_an_unreadable_file_fails_naming_it(tmp_path):
    path = tmp_path / "skills.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(WrittenSkillError, match="skills.json: unreadable"):
        load_written_skills(path)
    with pytest.raises(WrittenSkillError, match="object of task type"):
        load_written_skills(_write(tmp_path, [1, 2]))
