"""The extractor prompt of the reference skill format, in the paper's wording: ALFWorld's as is,
and the text every other environment edits into its own (`mind2web_skill_prompt`); and the
compact format's prompt every environment shares (`compact_extractor_messages`: its own system
text, then task, trajectory, outcome and the compact schema).

Owns `reference_extractor_prompt(question, trajectory, success)`: the reference's single user
message (Fanzy27/Evolving-RL src/alfworld/prompts.py `format_extractor_messages`, :255-290):
the task, the trajectory between markers, "True Environment Success", a note on the evidence,
then the extraction guidance (`EXTRACTOR_INSTRUCTION_PROMPT`, :138-180) and the schema text
(`SKILL_JSON_SCHEMA_PROMPT`, :54-136). The wording is a hyper-parameter of the method and is
reproduced as is, with one repair: the reference's schema example ends in a stray `],` + `]`
(:104-105) and is not JSON; ours is `SCHEMA_EXAMPLE` printed by `json.dumps(indent=2)`, the
reference's own layout, so the example parses and validates as a reference skill.
"""

from __future__ import annotations

import json

from evolving_rl.core.skill import skill_schema_text

SCHEMA_EXAMPLE = {
    "name": "string, kebab-case",
    "description": "string, 1-2 sentences stating what the skill does and when to use it",
    "metadata": {
        "source_task_type": "string",
        "success_signal": "success or failure",
        "abstraction_level": "low, medium, or high",
        "skill_category": "string, a short descriptive category label",
    },
    "skill_overview": ["string", "string"],
    "when_to_use": ["string"],
    "inputs_to_identify": ["string"],
    "workflow": [{"step": 1, "goal": "string", "action": "string",
                  "tools_or_strategy": "string", "completion_condition": "string"}],
    "decision_rules": ["string"],
    "error_handling": [{"error": "string", "cause": "string", "response": "string"}],
    "output_requirements": ["string"],
}

OUTPUT_RULES = (
    "You may optionally write a short plain-text analysis before the final skill JSON.\n"
    "\n"
    "Output rules:\n"
    "- Any analysis must be plain text, not JSON.\n"
    "- The final skill must appear as a single JSON object at the end of the response.\n"
    "- You may wrap the final JSON object in a ```json fenced block if helpful.\n"
    "- The parser will ignore non-JSON text and extract only the final skill JSON object.\n"
    "\n"
)

FIELD_RULES = (
    "Field requirements:\n"
    '- "name": must be valid kebab-case\n'
    '- "description": must include both what the skill does and when to use it\n'
    '- "skill_overview": prefer 2-5 items when evidence is sufficient; otherwise [] is '
    "allowed\n"
    '- "when_to_use": prefer 2-6 items when evidence is sufficient; otherwise [] is allowed\n'
    '- "inputs_to_identify": prefer at least 2 items when supported by evidence; otherwise [] '
    "is allowed\n"
    '- "workflow": prefer 2-8 steps when the evidence supports a stable workflow\n'
    '- "decision_rules": prefer 1-5 items when supported by evidence; otherwise [] is '
    "allowed\n"
    '- "error_handling": prefer 1-5 items when supported by evidence; otherwise [] is '
    "allowed\n"
    '- "output_requirements": prefer 1-5 items when supported by evidence; otherwise [] is '
    "allowed\n"
    "\n"
    "Additional constraints:\n"
    "1. Do not copy the trajectory verbatim.\n"
    "2. Do not include one-off entities, IDs, paths, or accidental details unless they "
    "represent a stable pattern.\n"
    "3. If the task is only weakly generalizable, output a narrow but reusable skill.\n"
    "4. The workflow must be executable and concrete.\n"
    "5. Decision rules must contain real conditional guidance, not just repeat the workflow.\n"
    "6. Error handling must address realistic risks, especially those revealed by failure "
    "examples.\n"
    "7. The final JSON must be internally consistent, specific, and free of filler.\n"
    "8. Every required field must be present.\n"
    "9. If evidence is insufficient, keep the field present but you may use conservative "
    'empty values such as "" or [] instead of inventing unsupported content.\n'
    "10. For failed examples, a short analysis of the failure cause and the transferable "
    "lesson is strongly encouraged before the final JSON.\n"
    "\n"
    "Before producing the final JSON, identify:\n"
    "- the task type\n"
    "- the key success or failure factors\n"
    "- the reusable patterns vs. one-off details\n"
)

GUIDANCE = (
    "Now use the example above to extract a reusable skill.\n"
    "\n"
    "The goal is not to retell the case, but to capture a reusable skill that could help on "
    "similar tasks.\n"
    "\n"
    "A good skill should capture:\n"
    "- what kind of task this is\n"
    "- when the skill should be used\n"
    "- when it should not be used\n"
    "- the stable workflow\n"
    "- the decision rules behind the workflow\n"
    "- common failure modes and how to handle them\n"
    "- the expected final output\n"
    "\n"
    "Follow these rules:\n"
    "\n"
    "1. Abstract from the example\n"
    "Infer the broader task type, user intent, target outcome, and repeatable workflow "
    "pattern.\n"
    "Do not rewrite the full trajectory. Generalize it into a reusable skill.\n"
    "\n"
    "2. Make trigger conditions explicit\n"
    "The skill must clearly say:\n"
    "- what it does\n"
    "- when it should be used\n"
    "- how users may express this need\n"
    "- when it should not be used\n"
    "\n"
    "3. Preserve workflow structure\n"
    "If the trajectory shows a multi-step process, convert it into an ordered workflow.\n"
    "If it shows branching choices, convert them into decision rules.\n"
    "\n"
    "4. Learn from success and failure\n"
    "- If the example succeeded, extract the key steps and checks that made it work.\n"
    "- If the example failed, extract where it failed, why it failed, and what rules or "
    "checks would reduce future failures.\n"
    "\n"
    "5. Stay evidence-grounded\n"
    "Every major step, rule, and error-handling item should be supported by the request, "
    "trajectory, or success/failure signal.\n"
    "Do not invent unsupported tools, procedures, or domain knowledge.\n"
    "If evidence is limited, produce a narrower skill.\n"
    "\n"
    "6. Analysis is allowed before the final skill JSON\n"
    "You may first write a short analysis section, especially for failed examples where "
    "failure diagnosis is useful.\n"
    "If you do, keep it concise, keep it plain text, and put the final JSON object last.\n"
)


EVIDENCE_NOTE = (
    "The case details above are the full evidence you should rely on. Please read them first, "
    "then assess the trajectory quality and extract a reusable skill. If the sample failed, a "
    "brief failure analysis is especially helpful. Any analysis should come before the final "
    "skill JSON.\n\n"
)

def instruction(guidance: str, schema_example: dict, field_rules: str) -> str:
    """The extraction guidance, then the schema text: the output rules, the example, the field
    rules (an environment passes its edited texts)."""
    return (f"{guidance}\n\n{OUTPUT_RULES}Use exactly this JSON schema:\n\n"
            f"{json.dumps(schema_example, indent=2)}\n\n{field_rules}")


INSTRUCTION = instruction(GUIDANCE, SCHEMA_EXAMPLE, FIELD_RULES)


def reference_extractor_prompt(question: str, trajectory: str, success: bool,
                               guidance: str = INSTRUCTION) -> str:
    """The user message of the reference extractor (it has no system message); `guidance`:
    the instruction it ends with (an environment's own, from `instruction`)."""
    return (f"Task: {question}\n\nAgent's Trajectory:\n<<<BEGIN_TRAJECTORY>>>\n{trajectory}\n"
            f"<<<END_TRAJECTORY>>>\n\nTrue Environment Success: {success}\n\n{EVIDENCE_NOTE}"
            f"Use the following extraction guidance and output requirements:\n\n{guidance}")


def compact_extractor_messages(system: str, question: str, trajectory: str,
                               success: bool) -> list[dict[str, str]]:
    """The compact format's extractor messages: `system`, then one user message."""
    outcome = "The agent SUCCEEDED." if success else "The agent FAILED."
    user = (f"Task: {question}\n\nTrajectory:\n{trajectory or '(no steps)'}\n\n"
            f"Outcome: {outcome}\n\n{skill_schema_text()}\n\n"
            "Write the skill as one JSON object.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
