"""Skills: the JSON object an extractor writes, in one of two formats, and the solver's card.

Owns `SkillFormat`, `SkillParseResult` and the entry points that take a format: `parse_skill`
(free model text -> validated skill, never raising), `validate_skill` (a decoded object ->
validated skill, e.g. a library record read back) and `render_skill_card` (the Markdown the
solver sees). The formats live in their own modules: `skill_reference` (the paper's schema and
card, the default) and `skill_compact` (five fields, for small models); `skill_search` finds the
object in the text and `skill_fields` holds the shared failure reasons and field readers (a
format's reader raises `InvalidField`, which `validate_skill` turns into the result's reason).

Parsing: empty text is "empty_output"; otherwise `skill_search.find_skill_object` chooses one
JSON object, ranked by the keys of the format's schema, and only that object is validated
(its reason is the result's). With no object found the reason is "invalid_json" if the text
holds a `{`, else "no_json_object".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evolving_rl.core.skill_compact import (
    COMPACT_KEYS,
    Skill,
    read_compact,
    render_compact_card,
    skill_schema_text,
)
from evolving_rl.core.skill_fields import InvalidField, ParseReason
from evolving_rl.core.skill_reference import (
    REFERENCE_KEYS,
    ReferenceSkill,
    read_reference,
    render_reference_card,
)
from evolving_rl.core.skill_search import find_skill_object
from evolving_rl.core.strenum import StrEnum

__all__ = [
    "ParseReason",
    "ReferenceSkill",
    "Skill",
    "SkillFormat",
    "SkillParseResult",
    "parse_skill",
    "render_skill_card",
    "skill_schema_text",
    "validate_skill",
]


class SkillFormat(StrEnum):
    """`pipeline.skill_format`: the paper's schema, or the compact one for small models."""

    REFERENCE = "reference"
    COMPACT = "compact"


@dataclass(frozen=True)
class SkillParseResult:
    """`skill` is set iff `ok`; `reason` is "ok" or a stable failure string (see ParseReason)."""

    ok: bool
    skill: Skill | ReferenceSkill | None
    reason: str

    @property
    def kind(self) -> ParseReason:
        """The reason without its field suffix, for metrics."""
        return ParseReason(self.reason.split(":", 1)[0])


def failure(kind: ParseReason) -> SkillParseResult:
    return SkillParseResult(False, None, str(kind))


_KEYS = {SkillFormat.REFERENCE: REFERENCE_KEYS, SkillFormat.COMPACT: COMPACT_KEYS}


def validate_skill(obj: dict[str, Any], skill_format: SkillFormat | str) -> SkillParseResult:
    """Validate a decoded JSON object (unwrapping one {"key": {...}} level) as `skill_format`."""
    read = read_reference if SkillFormat(skill_format) is SkillFormat.REFERENCE else read_compact
    try:
        skill = read(obj)
    except InvalidField as invalid:
        return SkillParseResult(False, None, str(invalid))
    return SkillParseResult(True, skill, str(ParseReason.OK))


def parse_skill(text: str, skill_format: SkillFormat | str) -> SkillParseResult:
    """Parse raw extractor output into a skill of `skill_format`; never raises on any string."""
    if not text.strip():
        return failure(ParseReason.EMPTY_OUTPUT)
    obj = find_skill_object(text, _KEYS[SkillFormat(skill_format)])
    if obj is None:
        return failure(ParseReason.INVALID_JSON if "{" in text else ParseReason.NO_JSON_OBJECT)
    return validate_skill(obj, skill_format)


def render_skill_card(skill: Skill | ReferenceSkill) -> str:
    """The Markdown card of a skill, in its own format."""
    if isinstance(skill, ReferenceSkill):
        return render_reference_card(skill)
    return render_compact_card(skill)
