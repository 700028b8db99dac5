"""Hand-written ALFWorld skills, one per task type (evaluation protocol `written_skill`).

Owns `load_written_skills`: `data/alfworld_written_skills.json` (shipped in the package) maps
each of the six task types to one skill in the reference schema (`core.skill_reference`),
written once by hand from the game's rules (alfworld 0.4.2's `alfred.twl2` command templates
and `alfred.pddl` preconditions: "go to", "open", "take X from Y", "move X to Y", "heat X with
microwave 1", "cool X with fridge 1", "clean X with sinkbasin 1", "use desklamp 1"; a closed
receptacle must be opened before taking from or moving into it, heating and cooling need the
appliance at hand but not open, one object is held at a time). Loading validates every skill
and renders it to its Markdown card with the core's renderer; a bad file raises
`WrittenSkillError` naming the task type. The cards are the ceiling of the skill pipeline: can
the solver use a correct skill at all.

Card lengths (rendered Markdown, SmolLM2-135M-Instruct tokenizer, no special tokens):
pick_and_place_simple 195, look_at_obj_in_light 225, pick_clean_then_place_in_recep 229,
pick_heat_then_place_in_recep 230, pick_cool_then_place_in_recep 230, pick_two_obj_and_place 247.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, get_args

from evolving_rl.config.schema import AlfworldTaskType
from evolving_rl.core.skill import SkillFormat, render_skill_card, validate_skill

TASK_TYPES: tuple[str, ...] = get_args(AlfworldTaskType)
WRITTEN_SKILLS_FILE = "alfworld_written_skills.json"


class WrittenSkillError(ValueError):
    """The written-skill file is unreadable, lacks a task type or holds an invalid skill."""


def default_path() -> Path:
    """The file shipped in the package."""
    return Path(str(resources.files("evolving_rl.domains") / "data" / WRITTEN_SKILLS_FILE))


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise WrittenSkillError(f"{path}: unreadable written skills ({error})") from None
    if not isinstance(data, dict):
        raise WrittenSkillError(f"{path}: must be an object of task type -> skill")
    return data


def _card(path: Path, task_type: str, skill: object) -> str:
    parsed = (validate_skill(skill, SkillFormat.REFERENCE) if isinstance(skill, dict)
              else None)
    if parsed is None or parsed.skill is None:
        reason = parsed.reason if parsed is not None else "not a JSON object"
        raise WrittenSkillError(f"{path}: the written skill of {task_type!r} is invalid "
                                f"({reason})")
    return render_skill_card(parsed.skill)


def load_written_skills(path: Path | None = None) -> dict[str, str]:
    """Task type -> rendered card for all six task types (rules in the module docstring)."""
    path = path or default_path()
    data = _read(path)
    missing = [t for t in TASK_TYPES if t not in data]
    unknown = sorted(set(data) - set(TASK_TYPES))
    if missing or unknown:
        raise WrittenSkillError(f"{path}: written skills must cover exactly the six task types "
                                f"(missing {missing}, unknown {unknown})")
    return {task_type: _card(path, task_type, data[task_type]) for task_type in TASK_TYPES}
