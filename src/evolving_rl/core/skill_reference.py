"""The reference skill format (`pipeline.skill_format: reference`, the paper's format).

Owns `ReferenceSkill` (with `WorkflowStep`, `ErrorCase`, `SkillMetadata`), its reader, its
Markdown card and `REFERENCE_KEYS` (the key set that ranks candidate objects). The rules follow
Fanzy27/Evolving-RL src/alfworld/prompts.py: `SKILL_JSON_SCHEMA_PROMPT` (the fields, :54-136),
`REQUIRED_SKILL_FIELDS` and `skill_json_to_markdown` (validation and card, :298, :411-521).

Fields. `name` and `description` are the only required ones (:430: present and truthy; here
non-blank strings). The prompt asks for a kebab-case name but the reference never checks it,
so neither do we.
Every other field may be absent, null or empty: `metadata` {source_task_type, success_signal,
abstraction_level, skill_category} (free strings: "low|medium|high" is asked, not enforced);
string lists `skill_overview`, `when_to_use`, `when_not_to_use` (not in the ALFWorld prompt,
rendered when given), `inputs_to_identify`, `decision_rules`, `output_requirements`;
`workflow`, a list of {step, goal, action, tools_or_strategy, completion_condition}; and
`error_handling`, a list of {error, cause, response}. Unknown keys are ignored.

Types. The reference renders whatever it finds with an f-string and counts an exception as a
format failure (src/alfworld/generate/extractor.py:265-279): a workflow or error-handling entry
that is not an object raises there (`step.get`, :486) and is `wrong_type:<field>` here. Where
the reference would print a Python repr or iterate a string's characters into the card we are
stricter, also with `wrong_type:<field>`: a text that is not a string (or null), a list field
that is not a list (or null), a list item that is not a string, an entry field that is not a
string (`step` may also be an integer, as in the schema example); and so is `metadata` that is
neither an object nor null (the reference drops it, :441). Strings are stripped, inner
whitespace kept (the audit reads the card the reference would render); null reads as empty;
blank list items and entries whose text fields are all blank are dropped. An entry's missing
`step` renders as "?", as in the reference.

Limits (generous; a reply is bounded by the extractor's max_new_tokens anyway): name
`MAX_NAME_CHARS`; description and any other string `MAX_TEXT_CHARS`; metadata values
`MAX_META_CHARS` (and a step number); each list at most `MAX_ITEMS` non-blank items or
entries. Over a limit: `too_long:<field>`.
"""

from __future__ import annotations

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

MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 2_000
MAX_META_CHARS = 200
MAX_ITEMS = 20

# The ranking key set of the ALFWorld reference (prompts.py:317-328); `when_not_to_use` is
# not in it (the Mind2Web reference adds it).
REFERENCE_KEYS = frozenset({
    "name", "description", "metadata", "skill_overview", "when_to_use", "inputs_to_identify",
    "workflow", "decision_rules", "error_handling", "output_requirements"})
LIST_FIELDS = ("skill_overview", "when_to_use", "when_not_to_use", "inputs_to_identify",
               "decision_rules", "output_requirements")
# (metadata key, card label) in the card's order (prompts.py:443-450)
METADATA_LABELS = (("skill_category", "Category"), ("source_task_type", "Source"),
                   ("abstraction_level", "Level"), ("success_signal", "Signal"))
WORKFLOW_FIELDS = ("goal", "action", "tools_or_strategy", "completion_condition")
ERROR_FIELDS = ("error", "cause", "response")


@dataclass(frozen=True)
class SkillMetadata:
    """The four metadata strings; "" when absent."""

    source_task_type: str = ""
    success_signal: str = ""
    abstraction_level: str = ""
    skill_category: str = ""


@dataclass(frozen=True)
class WorkflowStep:
    """One workflow entry; `step` is the number the model wrote ("?" when it wrote none)."""

    step: str
    goal: str = ""
    action: str = ""
    tools_or_strategy: str = ""
    completion_condition: str = ""


@dataclass(frozen=True)
class ErrorCase:
    """One error-handling entry."""

    error: str = ""
    cause: str = ""
    response: str = ""


@dataclass(frozen=True)
class ReferenceSkill:
    """A validated reference skill: `name` and `description` non-blank, the rest may be empty."""

    name: str
    description: str
    metadata: SkillMetadata = SkillMetadata()
    skill_overview: tuple[str, ...] = ()
    when_to_use: tuple[str, ...] = ()
    when_not_to_use: tuple[str, ...] = ()
    inputs_to_identify: tuple[str, ...] = ()
    workflow: tuple[WorkflowStep, ...] = ()
    decision_rules: tuple[str, ...] = ()
    error_handling: tuple[ErrorCase, ...] = ()
    output_requirements: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """The JSON form (what `read_reference` accepts back)."""
        meta = {key: getattr(self.metadata, key) for key, _ in METADATA_LABELS}
        out: dict[str, object] = {
            "name": self.name, "description": self.description,
            "metadata": {key: value for key, value in meta.items() if value}}
        out.update({field: list(getattr(self, field)) for field in LIST_FIELDS})
        out["workflow"] = [{"step": s.step, **{f: getattr(s, f) for f in WORKFLOW_FIELDS}}
                           for s in self.workflow]
        out["error_handling"] = [{f: getattr(e, f) for f in ERROR_FIELDS}
                                 for e in self.error_handling]
        return out


def _text(value: object, field: str, limit: int = MAX_TEXT_CHARS) -> str:
    return read_text(value, field, limit, collapse=False)


def _list(obj: dict[str, Any], field: str) -> list[Any]:
    value = obj.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidField(ParseReason.WRONG_TYPE, field)
    return value


def _metadata(obj: dict[str, Any]) -> SkillMetadata:
    value = obj.get("metadata")
    if value is None:
        return SkillMetadata()
    if not isinstance(value, dict):
        raise InvalidField(ParseReason.WRONG_TYPE, "metadata")
    return SkillMetadata(**{key: _text(value.get(key), "metadata", MAX_META_CHARS)
                            for key, _ in METADATA_LABELS})


def _entries(obj: dict[str, Any], field: str, names: tuple[str, ...]
             ) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(entry, its texts by name) for each entry of an object list whose texts are not all
    blank; at most `MAX_ITEMS` of them."""
    out = []
    for entry in _list(obj, field):
        if not isinstance(entry, dict):
            raise InvalidField(ParseReason.WRONG_TYPE, field)
        texts = {name: _text(entry.get(name), field) for name in names}
        if any(texts.values()):
            out.append((entry, texts))
    if len(out) > MAX_ITEMS:
        raise InvalidField(ParseReason.TOO_LONG, field)
    return out


def _step_number(value: object) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidField(ParseReason.WRONG_TYPE, "workflow")
    return _text(str(value), "workflow", MAX_META_CHARS) or "?"


def read_reference(obj: dict[str, Any]) -> ReferenceSkill:
    """A decoded JSON object (unwrapping one {"key": {...}} level) as a ReferenceSkill; else
    `InvalidField`."""
    obj = unwrap(obj)
    name = required_text(obj, "name", MAX_NAME_CHARS, collapse=False)
    description = required_text(obj, "description", MAX_TEXT_CHARS, collapse=False)
    metadata = _metadata(obj)
    lists = {field: read_items(_list(obj, field), field, MAX_ITEMS, MAX_TEXT_CHARS,
                               collapse=False) for field in LIST_FIELDS}
    workflow = tuple(WorkflowStep(_step_number(entry.get("step")), **texts)
                     for entry, texts in _entries(obj, "workflow", WORKFLOW_FIELDS))
    errors = tuple(ErrorCase(**texts)
                   for _, texts in _entries(obj, "error_handling", ERROR_FIELDS))
    return ReferenceSkill(name, description, metadata, workflow=workflow,
                          error_handling=errors, **lists)


def _bullets(title: str, items: tuple[str, ...]) -> list[str]:
    return ["", f"## {title}", *(f"- {item}" for item in items)] if items else []


def _workflow_lines(workflow: tuple[WorkflowStep, ...]) -> list[str]:
    lines = ["", "## Workflow"] if workflow else []
    for step in workflow:
        lines.append(f"{step.step}. **{step.goal}**: {step.action}")
        if step.tools_or_strategy:
            lines.append(f"   - Strategy: {step.tools_or_strategy}")
        if step.completion_condition:
            lines.append(f"   - Done when: {step.completion_condition}")
    return lines


def render_reference_card(skill: ReferenceSkill) -> str:
    """The reference Markdown card (prompts.py:437-519), empty sections omitted."""
    lines = [f"# Skill: {skill.name}", "", skill.description]
    meta = [f"**{label}**: {getattr(skill.metadata, key)}"
            for key, label in METADATA_LABELS if getattr(skill.metadata, key)]
    if meta:
        lines += ["", " | ".join(meta)]
    lines += _bullets("Overview", skill.skill_overview)
    lines += _bullets("When to Use", skill.when_to_use)
    lines += _bullets("When NOT to Use", skill.when_not_to_use)
    lines += _bullets("Inputs to Identify", skill.inputs_to_identify)
    lines += _workflow_lines(skill.workflow)
    lines += _bullets("Decision Rules", skill.decision_rules)
    if skill.error_handling:
        lines += ["", "## Error Handling", *(f"- **{e.error}**: {e.cause} → {e.response}"
                                              for e in skill.error_handling)]
    lines += _bullets("Output Requirements", skill.output_requirements)
    return "\n".join(lines)
