"""The compact skill format: five fields, for small models (`pipeline.skill_format: compact`).

Owns the compact `Skill` dataclass, its field limits, its reader, its Markdown card and the
schema text shown in the compact extractor prompt. `name`, `applicable_when` and a non-empty
`steps` list are required; `pitfalls` and `summary` are optional. Text fields are
whitespace-normalised (runs collapse to one space); blank list items are dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evolving_rl.core.skill_fields import (
    InvalidField,
    ParseReason,
    read_items,
    read_text,
    required_text,
    unwrap,
)

MAX_NAME_CHARS = 120
MAX_TEXT_CHARS = 1_000  # applicable_when and summary
MAX_ITEM_CHARS = 500  # one step or one pitfall
MAX_STEPS = 15
MAX_PITFALLS = 10

COMPACT_KEYS = frozenset({"name", "applicable_when", "steps", "pitfalls", "summary"})


@dataclass(frozen=True)
class Skill:
    """A validated compact skill; strings are stripped, whitespace-normalised and non-empty."""

    name: str
    applicable_when: str
    steps: tuple[str, ...]
    pitfalls: tuple[str, ...] = ()
    summary: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The JSON form (what `read_compact` accepts back)."""
        out: dict[str, object] = {
            "name": self.name,
            "applicable_when": self.applicable_when,
            "steps": list(self.steps),
            "pitfalls": list(self.pitfalls),
        }
        if self.summary is not None:
            out["summary"] = self.summary
        return out

    def texts(self) -> tuple[str, ...]:
        """Every free-text field in schema order."""
        tail = (self.summary,) if self.summary is not None else ()
        return (self.name, self.applicable_when, *self.steps, *self.pitfalls, *tail)


def _steps(obj: dict[str, Any]) -> tuple[str, ...]:
    if "steps" not in obj:
        raise InvalidField(ParseReason.MISSING_FIELD, "steps")
    steps = read_items(obj["steps"], "steps", MAX_STEPS, MAX_ITEM_CHARS, collapse=True)
    if not steps:
        raise InvalidField(ParseReason.EMPTY_FIELD, "steps")
    return steps


def read_compact(obj: dict[str, Any]) -> Skill:
    """A decoded JSON object (unwrapping one {"key": {...}} level) as a Skill; else
    `InvalidField`."""
    obj = unwrap(obj)
    return Skill(
        name=required_text(obj, "name", MAX_NAME_CHARS, collapse=True),
        applicable_when=required_text(obj, "applicable_when", MAX_TEXT_CHARS, collapse=True),
        steps=_steps(obj),
        pitfalls=read_items(obj.get("pitfalls", []), "pitfalls", MAX_PITFALLS, MAX_ITEM_CHARS,
                            collapse=True),
        summary=read_text(obj.get("summary"), "summary", MAX_TEXT_CHARS, collapse=True) or None,
    )


def render_compact_card(skill: Skill) -> str:
    """The Markdown card injected into the solver's system prompt."""
    lines = [f"### Skill: {skill.name}"]
    if skill.summary:
        lines += ["", skill.summary]
    lines += ["", f"**When to use:** {skill.applicable_when}", "", "**Steps:**"]
    lines += [f"{number}. {step}" for number, step in enumerate(skill.steps, start=1)]
    if skill.pitfalls:
        lines += ["", "**Pitfalls:**", *(f"- {pitfall}" for pitfall in skill.pitfalls)]
    return "\n".join(lines)


def skill_schema_text() -> str:
    """The schema description shown in the compact extractor prompt (limits match the validator)."""
    example = {
        "name": "<short title>",
        "applicable_when": "<the situations where this skill applies>",
        "steps": ["<first step>", "<second step>"],
        "pitfalls": ["<a mistake to avoid>"],
        "summary": "<optional: one sentence on what the skill achieves>",
    }
    return (
        "A skill is one JSON object with these fields:\n"
        f'- "name" (string, required): a short title, at most {MAX_NAME_CHARS} characters.\n'
        '- "applicable_when" (string, required): the situations where the skill applies.\n'
        f'- "steps" (list of strings, required, 1 to {MAX_STEPS} items): the procedure, '
        "in order.\n"
        f'- "pitfalls" (list of strings, optional, 0 to {MAX_PITFALLS} items): mistakes '
        "to avoid.\n"
        '- "summary" (string, optional): one sentence on what the skill achieves.\n'
        f"Each step or pitfall is at most {MAX_ITEM_CHARS} characters; other text fields at "
        f"most {MAX_TEXT_CHARS}. Write in plain English.\n"
        f"Example:\n{json.dumps(example, indent=2)}"
    )
