"""The Mind2Web extractor prompt of the reference skill format, in the paper's web wording.

Owns `reference_extractor_prompt(question, trajectory, success)`. The reference's web extractor
(Fanzy27/Evolving-RL src/web/prompts.py `format_extractor_messages`, `EXTRACTOR_INSTRUCTION_PROMPT`,
`SKILL_JSON_SCHEMA_PROMPT`) is its ALFWorld prompt (`skill_prompt`, reproduced there)
with web wording; so this module takes the ALFWorld texts and applies exactly those edits
(`_GUIDANCE_EDITS`, `_FIELD_EDITS`;
each must apply exactly once, or the import fails): "web" tasks and risks, page cues as the trigger
conditions, "one-off page IDs, exact refs, exact dates", a `when_not_to_use` field rule, and a
schema example that lists `when_not_to_use` and, as the reference's web example, no
`error_handling` (the field stays optional and its rule stays in the text).
"""

from __future__ import annotations

from evolving_rl.domains import skill_prompt as base

_GUIDANCE_EDITS = (
    ("similar tasks.\n", "similar web tasks.\n"),
    ("- what kind of task this is\n", "- what kind of web task this is\n"),
    ("- the expected final output\n", "- the expected final outcome\n"),
    ("- how users may express this need\n",
     "- what page cues, fields, widgets, or states indicate applicability\n"),
)
_FIELD_EDITS = (
    ("otherwise [] is allowed\n- \"inputs_to_identify\"",
     "otherwise [] is allowed\n- \"when_not_to_use\": prefer 1-4 items when evidence is "
     "sufficient; otherwise [] is allowed\n- \"inputs_to_identify\""),
    ("one-off entities, IDs, paths, or accidental details",
     "one-off page IDs, exact refs, exact dates, or accidental details"),
    ("not just repeat the workflow.", "not just restate the workflow."),
    ("address realistic risks", "address realistic web interaction risks"),
)


def _web(text: str, edits: tuple[tuple[str, str], ...]) -> str:
    for old, new in edits:
        if text.count(old) != 1:
            raise RuntimeError(f"web edit {old!r} no longer applies to the reference prompt")
        text = text.replace(old, new)
    return text


def _schema_example() -> dict:
    example: dict = {}
    for key, value in base.SCHEMA_EXAMPLE.items():
        if key != "error_handling":
            example[key] = value
        if key == "when_to_use":
            example["when_not_to_use"] = ["string"]
    return example


SCHEMA_EXAMPLE = _schema_example()
GUIDANCE = _web(base.GUIDANCE, _GUIDANCE_EDITS)
FIELD_RULES = _web(base.FIELD_RULES, _FIELD_EDITS)
INSTRUCTION = base.instruction(GUIDANCE, SCHEMA_EXAMPLE, FIELD_RULES)


def reference_extractor_prompt(question: str, trajectory: str, success: bool) -> str:
    """The user message of the reference web extractor (it has no system message)."""
    return base.reference_extractor_prompt(question, trajectory, success, INSTRUCTION)
