"""Mind2Web's reading of the `<action>` tag: one web action for the env server's `/step`.

Owns `parse_web_action`, the action record `WebAction` and `WebActionParse`. The tag content
(`core.actions`) is a JSON object `{"op", "ref", "value"}` (the first `{...}` span when the
content has text around it) or a line `OP eN` / `OP eN | value` (`:` accepted for `|`, the ref
optionally in brackets). The op is upper-cased, HOVER and ENTER become CLICK, and it must be
CLICK, TYPE or SELECT; the ref must read `eN` (`[eN]` and `ref=eN` accepted); TYPE and SELECT
need a non-empty value, CLICK drops any value; whitespace in the value is collapsed. Anything
else is `malformed_action`, never an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from evolving_rl.core.actions import ActionStatus, extract_action

WEB_OPS = ("CLICK", "TYPE", "SELECT")
_WEB_ALIASES = {"HOVER": "CLICK", "ENTER": "CLICK"}
_WEB_LINE = re.compile(r"(?P<op>[A-Za-z]+)\s+(?P<ref>\[?(?:ref=)?e[0-9]+\]?)"
                       r"(?:\s*[|:]\s*(?P<value>.*))?", re.DOTALL | re.IGNORECASE)
_WEB_REF = re.compile(r"\[?(?:ref=)?(e[0-9]+)\]?", re.IGNORECASE)  # ASCII digits, as the server
_JSON_SPAN = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True)
class WebAction:
    """One Mind2Web action as the env server's `/step` takes it."""

    op: str
    ref: str
    value: str = ""

    def to_wire(self) -> dict[str, str]:
        return {"op": self.op, "ref": self.ref, "value": self.value}

    def as_text(self) -> str:
        """`OP eN` or `OP eN | value`; `parse_web_action` reads it back unchanged."""
        return f"{self.op} {self.ref} | {self.value}" if self.value else f"{self.op} {self.ref}"


@dataclass(frozen=True)
class WebActionParse:
    ok: bool
    action: WebAction | None
    status: ActionStatus


def _web_action(op: object, ref: object, value: object) -> WebAction | None:
    if not isinstance(op, str) or not isinstance(ref, str):
        return None
    op = op.strip().upper()
    op = _WEB_ALIASES.get(op, op)
    ref_match = _WEB_REF.fullmatch(ref.strip())
    if op not in WEB_OPS or ref_match is None:
        return None
    text = " ".join(value.split()) if isinstance(value, str) else ""
    if op == "CLICK":
        return WebAction(op, ref_match.group(1).lower())
    return WebAction(op, ref_match.group(1).lower(), text) if text else None


def _web_json(content: str) -> WebAction | None:
    span = _JSON_SPAN.search(content)
    if span is None:
        return None
    try:
        data = json.loads(span.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    return _web_action(data.get("op"), data.get("ref"), data.get("value"))


def parse_web_action(text: str) -> WebActionParse:
    """The tagged Mind2Web action (rules in the module docstring)."""
    content = extract_action(text)
    if content is None:
        return WebActionParse(False, None, ActionStatus.NO_ACTION_TAG)
    if not content:
        return WebActionParse(False, None, ActionStatus.EMPTY_ACTION)
    action = _web_json(content)
    line = _WEB_LINE.fullmatch(content)
    if action is None and line is not None:
        action = _web_action(line.group("op"), line.group("ref"), line.group("value"))
    if action is None:
        return WebActionParse(False, None, ActionStatus.MALFORMED_ACTION)
    return WebActionParse(True, action, ActionStatus.OK)
