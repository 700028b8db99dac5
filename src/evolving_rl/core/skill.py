"""Skill schema: the JSON object an extractor writes, its tolerant parser, and the solver's card.

Owns the `Skill` dataclass, the field limits, the schema text shown in the extractor prompt, the
search for a JSON object inside free model text, validation with stable failure reasons, and
`render_skill_card`, the Markdown the solver sees in its system prompt.

Parsing order (the first object that validates wins):
  1. the whole text as JSON;
  2. fenced ``` blocks (with or without a language tag), in order;
  3. JSON objects starting at a `{` anywhere in the text, largest first. Each start is decoded
     with `json.JSONDecoder.raw_decode`, which respects strings and escapes (braces inside
     strings never count), ignores what follows the object, and runs in C; starts inside an
     object already decoded are skipped and at most `MAX_OBJECT_STARTS` starts are tried, so a
     50 KB output costs a few linear passes.
A one-key wrapper such as {"skill": {...}} is unwrapped. When nothing validates, the reason is
that of the first JSON object met in the order above; otherwise "invalid_json" if the text holds
a `{`, else "no_json_object". Text fields are whitespace-normalised (runs collapse to one space).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from evolving_rl.core.strenum import StrEnum

MAX_NAME_CHARS = 120
MAX_TEXT_CHARS = 1_000  # applicable_when and summary
MAX_ITEM_CHARS = 500  # one step or one pitfall
MAX_STEPS = 15
MAX_PITFALLS = 10
MAX_OBJECT_STARTS = 32  # `{` positions tried by the object search
MAX_FENCED_BLOCKS = 16

_FENCE = "```"
_FENCE_TAG = re.compile(r"[ \t]*[A-Za-z0-9_+-]*[ \t]*(?:\n|(?=\{))")
_DECODER = json.JSONDecoder()


class ParseReason(StrEnum):
    """Kinds of parse outcome. Field-level kinds appear as "<kind>:<field>" in `reason`."""

    OK = "ok"
    EMPTY_OUTPUT = "empty_output"
    NO_JSON_OBJECT = "no_json_object"
    INVALID_JSON = "invalid_json"
    MISSING_FIELD = "missing_field"  # e.g. "missing_field:steps"
    WRONG_TYPE = "wrong_type"  # e.g. "wrong_type:steps" (not a list of strings)
    EMPTY_FIELD = "empty_field"  # required string blank, or no non-blank step
    TOO_LONG = "too_long"  # a string over its limit, or too many items


@dataclass(frozen=True)
class Skill:
    """A validated skill; strings are stripped, whitespace-normalised and non-empty."""

    name: str
    applicable_when: str
    steps: tuple[str, ...]
    pitfalls: tuple[str, ...] = ()
    summary: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The JSON form (what `parse_skill` accepts back)."""
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
        """Every free-text field in schema order: what the language audit reads."""
        tail = (self.summary,) if self.summary is not None else ()
        return (self.name, self.applicable_when, *self.steps, *self.pitfalls, *tail)


@dataclass(frozen=True)
class SkillParseResult:
    """`skill` is set iff `ok`; `reason` is "ok" or a stable failure string (see ParseReason)."""

    ok: bool
    skill: Skill | None
    reason: str

    @property
    def kind(self) -> ParseReason:
        """The reason without its field suffix, for metrics."""
        return ParseReason(self.reason.split(":", 1)[0])


class _Invalid(Exception):
    """Raised by the field readers; carries the "<kind>:<field>" reason."""


def _fail(kind: ParseReason) -> SkillParseResult:
    return SkillParseResult(False, None, str(kind))


def _clean(text: str) -> str:
    return " ".join(text.split())


def _optional_text(obj: dict, field: str, limit: int) -> str | None:
    value = obj.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{ParseReason.WRONG_TYPE}:{field}")
    value = _clean(value)
    if len(value) > limit:
        raise _Invalid(f"{ParseReason.TOO_LONG}:{field}")
    return value or None


def _required_text(obj: dict, field: str, limit: int) -> str:
    if field not in obj:
        raise _Invalid(f"{ParseReason.MISSING_FIELD}:{field}")
    if obj[field] is None:
        raise _Invalid(f"{ParseReason.WRONG_TYPE}:{field}")
    value = _optional_text(obj, field, limit)
    if value is None:
        raise _Invalid(f"{ParseReason.EMPTY_FIELD}:{field}")
    return value


def _read_items(obj: dict, field: str, max_items: int, *, non_empty: bool) -> tuple[str, ...]:
    """A list of strings; a missing list is an error when it must be `non_empty`, else empty."""
    if field not in obj:
        if non_empty:
            raise _Invalid(f"{ParseReason.MISSING_FIELD}:{field}")
        return ()
    value = obj[field]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _Invalid(f"{ParseReason.WRONG_TYPE}:{field}")
    items = tuple(cleaned for cleaned in map(_clean, value) if cleaned)
    if non_empty and not items:
        raise _Invalid(f"{ParseReason.EMPTY_FIELD}:{field}")
    if len(items) > max_items or any(len(item) > MAX_ITEM_CHARS for item in items):
        raise _Invalid(f"{ParseReason.TOO_LONG}:{field}")
    return items


def validate_skill(obj: dict) -> SkillParseResult:
    """Validate a decoded JSON object (unwrapping one {"key": {...}} level) into a Skill."""
    if "name" not in obj and len(obj) == 1:
        (inner,) = obj.values()
        if isinstance(inner, dict):
            obj = inner
    try:
        skill = Skill(
            name=_required_text(obj, "name", MAX_NAME_CHARS),
            applicable_when=_required_text(obj, "applicable_when", MAX_TEXT_CHARS),
            steps=_read_items(obj, "steps", MAX_STEPS, non_empty=True),
            pitfalls=_read_items(obj, "pitfalls", MAX_PITFALLS, non_empty=False),
            summary=_optional_text(obj, "summary", MAX_TEXT_CHARS),
        )
    except _Invalid as invalid:
        return SkillParseResult(False, None, str(invalid))
    return SkillParseResult(True, skill, str(ParseReason.OK))


def _loads_object(text: str) -> dict | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _fenced_blocks(text: str) -> Iterator[str]:
    """Bodies between successive ``` pairs, language tag line removed; linear in len(text)."""
    marks: list[int] = []
    pos = text.find(_FENCE)
    while pos != -1 and len(marks) < 2 * MAX_FENCED_BLOCKS:
        marks.append(pos)
        pos = text.find(_FENCE, pos + len(_FENCE))
    for start, end in zip(marks[::2], marks[1::2], strict=False):
        body = text[start + len(_FENCE) : end]
        tag = _FENCE_TAG.match(body)
        yield body[tag.end() :] if tag else body


def _embedded_objects(text: str) -> list[dict]:
    """JSON objects decoded from `{` positions, largest first (see the module docstring)."""
    found: list[tuple[int, dict]] = []
    pos = text.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if pos == -1:
            break
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        found.append((end - pos, obj))
        pos = text.find("{", end)  # starts inside a decoded object are skipped
    found.sort(key=lambda item: -item[0])
    return [obj for _, obj in found]


def _candidate_objects(text: str) -> Iterator[dict]:
    direct = _loads_object(text)
    if direct is not None:
        yield direct
    for body in _fenced_blocks(text):
        fenced = _loads_object(body)
        if fenced is not None:
            yield fenced
    yield from _embedded_objects(text)


def parse_skill(text: str) -> SkillParseResult:
    """Parse raw extractor output into a Skill; never raises on any string input."""
    if not text.strip():
        return _fail(ParseReason.EMPTY_OUTPUT)
    first_failure: SkillParseResult | None = None
    for obj in _candidate_objects(text):
        result = validate_skill(obj)
        if result.ok:
            return result
        first_failure = first_failure or result
    if first_failure is not None:
        return first_failure
    return _fail(ParseReason.INVALID_JSON if "{" in text else ParseReason.NO_JSON_OBJECT)


def render_skill_card(skill: Skill) -> str:
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
    """The schema description shown in the extractor prompt (limits match the validator)."""
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
