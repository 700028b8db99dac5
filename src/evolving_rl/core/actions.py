"""Action parsing for both environments: the `<action>` tag, ALFWorld commands, Mind2Web ops.

Tag rule (`extract_action`, tags case-insensitive, content stripped): the first complete
`<action>...</action>` (if another `<action>` opens before that close, the last opening wins);
with no closing tag, what follows the last `<action>`, because generation stops at the
`</action>` stop string, which the server trims (a trailing partial "</act" is removed too).

ALFWorld (`parse_alfworld_action`): the content must equal an admissible command after
lower-casing, collapsing whitespace and stripping surrounding quotes and a final period. With
`lenient=True` a number refers to the 1-based numbered list of admissible commands ("3", "3.",
"3)"), a numbered command ("3. go to desk 1") is matched on its text, and when the whole content
does not match, its first non-empty line is tried the same way (small models keep writing after
the action). A non-admissible
action keeps the raw content in `action` so that it can be sent as-is (the game then answers
"Nothing happens.").

Mind2Web (`parse_web_action`): the JSON form {"op": ..., "ref": "eN", "value": ...} (keys
case-insensitive, trailing text after the object ignored; also found after leading prose when
the text does not read as the fallback form) or the fallback form "OP eN | value" (or
"OP eN value"). Ops are case-insensitive; HOVER and ENTER map to CLICK; ref must be e<digits>
(brackets allowed, normalised to lower case); TYPE and SELECT need a non-empty value (numbers
are turned into strings); CLICK drops any value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from evolving_rl.core.strenum import StrEnum

_OPEN = re.compile(r"<action>", re.IGNORECASE)
_CLOSE = re.compile(r"</action>", re.IGNORECASE)
_CLOSE_TAG = "</action>"
_NUMBERED = re.compile(r"(\d+)\s*[.):]?\s*(.*)", re.DOTALL)
_REF = re.compile(r"e\d+", re.IGNORECASE)
_FENCE = re.compile(r"^```[A-Za-z]*\s*|\s*```$")
_DECODER = json.JSONDecoder()


class ActionStatus(StrEnum):
    OK = "ok"
    NO_ACTION_TAG = "no_action_tag"
    EMPTY_ACTION = "empty_action"
    NOT_ADMISSIBLE = "not_admissible"  # ALFWorld
    INVALID_JSON = "invalid_json"  # Mind2Web: a `{` that does not start a JSON object
    UNPARSEABLE = "unparseable"  # Mind2Web: the fallback form has no op
    BAD_OP = "bad_op"
    MISSING_REF = "missing_ref"
    BAD_REF = "bad_ref"
    MISSING_VALUE = "missing_value"


class WebOp(StrEnum):
    CLICK = "CLICK"
    TYPE = "TYPE"
    SELECT = "SELECT"


_WEB_OPS = {
    "CLICK": WebOp.CLICK,
    "HOVER": WebOp.CLICK,
    "ENTER": WebOp.CLICK,
    "TYPE": WebOp.TYPE,
    "SELECT": WebOp.SELECT,
}


@dataclass(frozen=True)
class ActionParse:
    """ALFWorld parse: `action` is the command to send (canonical if ok, raw if not admissible)."""

    ok: bool
    action: str | None
    status: ActionStatus


@dataclass(frozen=True)
class WebAction:
    op: WebOp
    ref: str
    value: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"op": str(self.op), "ref": self.ref, "value": self.value}


@dataclass(frozen=True)
class WebActionParse:
    """Mind2Web parse: `action` is set iff `ok`."""

    ok: bool
    action: WebAction | None
    status: ActionStatus


def _strip_partial_close(tail: str) -> str:
    for size in range(len(_CLOSE_TAG) - 1, 1, -1):
        if tail[-size:].lower() == _CLOSE_TAG[:size]:
            return tail[:-size]
    return tail


def extract_action(text: str) -> str | None:
    """The stripped content of the action tag (rule in the module docstring); None if no tag."""
    first_open = _OPEN.search(text)
    if first_open is None:
        return None
    close = _CLOSE.search(text, first_open.end())
    if close is None:
        *_, last_open = _OPEN.finditer(text, first_open.start())
        return _strip_partial_close(text[last_open.end() :]).strip()
    *_, last_open = _OPEN.finditer(text, first_open.start(), close.start())
    return text[last_open.end() : close.start()].strip()


def _normalise_command(command: str) -> str:
    return " ".join(command.lower().split()).strip(" .'\"`")


def _numbered_command(content: str, admissible: Sequence[str], known: dict[str, str]) -> str | None:
    numbered = _NUMBERED.fullmatch(content)
    if numbered is None:
        return None
    number, rest = int(numbered.group(1)), numbered.group(2)
    if rest:
        return known.get(_normalise_command(rest))
    return admissible[number - 1] if 1 <= number <= len(admissible) else None


def _lenient_command(content: str, admissible: Sequence[str], known: dict[str, str]) -> str | None:
    """A number or numbered command, in the whole content or else on its first non-empty line
    (small models keep writing after the action when the closing tag never comes)."""
    command = _numbered_command(content, admissible, known)
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    if command is None and len(lines) > 1:
        first = lines[0]
        command = known.get(_normalise_command(first))
        command = command or _numbered_command(first, admissible, known)
    return command


def parse_alfworld_action(
    text: str, admissible: Sequence[str], *, lenient: bool = False
) -> ActionParse:
    """Match the tagged action against the admissible commands (rules in the module docstring)."""
    content = extract_action(text)
    if content is None:
        return ActionParse(False, None, ActionStatus.NO_ACTION_TAG)
    if not content:
        return ActionParse(False, None, ActionStatus.EMPTY_ACTION)
    known: dict[str, str] = {}
    for command in admissible:
        known.setdefault(_normalise_command(command), command)
    command = known.get(_normalise_command(content))
    if command is None and lenient:
        command = _lenient_command(content, admissible, known)
    if command is None:
        return ActionParse(False, content, ActionStatus.NOT_ADMISSIBLE)
    return ActionParse(True, command, ActionStatus.OK)


def _web_fail(status: ActionStatus) -> WebActionParse:
    return WebActionParse(False, None, status)


def _web_value(value: object) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    return value.strip() or None


def _build_web_action(op: object, ref: object, value: object) -> WebActionParse:
    web_op = _WEB_OPS.get(op.strip().upper()) if isinstance(op, str) else None
    if web_op is None:
        return _web_fail(ActionStatus.BAD_OP)
    if ref is None or (isinstance(ref, str) and not ref.strip()):
        return _web_fail(ActionStatus.MISSING_REF)
    ref_text = ref.strip().strip("[]").strip() if isinstance(ref, str) else ""
    if not _REF.fullmatch(ref_text):
        return _web_fail(ActionStatus.BAD_REF)
    if web_op is WebOp.CLICK:
        return WebActionParse(True, WebAction(web_op, ref_text.lower()), ActionStatus.OK)
    value_text = _web_value(value)
    if value_text is None:
        return _web_fail(ActionStatus.MISSING_VALUE)
    return WebActionParse(True, WebAction(web_op, ref_text.lower(), value_text), ActionStatus.OK)


def _parse_web_json(content: str, brace: int) -> WebActionParse:
    try:
        obj, _ = _DECODER.raw_decode(content, brace)
    except (ValueError, RecursionError):
        return _web_fail(ActionStatus.INVALID_JSON)
    if not isinstance(obj, dict):
        return _web_fail(ActionStatus.INVALID_JSON)
    fields = {str(key).strip().lower(): value for key, value in obj.items()}
    return _build_web_action(fields.get("op"), fields.get("ref"), fields.get("value"))


def _parse_web_fallback(content: str) -> WebActionParse:
    head, bar, after_bar = content.partition("|")
    words = head.split(None, 2)
    if not words:
        return _web_fail(ActionStatus.UNPARSEABLE)
    ref = words[1] if len(words) > 1 else None
    value = after_bar if bar else (words[2] if len(words) > 2 else None)
    return _build_web_action(words[0], ref, value)


def parse_web_action(text: str) -> WebActionParse:
    """Parse a Mind2Web action from model text (rules in the module docstring)."""
    content = extract_action(text)
    if content is None:
        return _web_fail(ActionStatus.NO_ACTION_TAG)
    content = _FENCE.sub("", content).strip()
    if not content:
        return _web_fail(ActionStatus.EMPTY_ACTION)
    if content.startswith("{"):
        return _parse_web_json(content, 0)
    parsed = _parse_web_fallback(content)
    brace = content.find("{")
    if parsed.status in (ActionStatus.BAD_OP, ActionStatus.UNPARSEABLE) and brace != -1:
        return _parse_web_json(content, brace)
    return parsed
