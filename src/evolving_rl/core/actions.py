"""Action parsing: the `<action>` tag, ALFWorld commands and Mind2Web actions.

Tag rule (`extract_action`, tags case-insensitive, content stripped): the first complete
`<action>...</action>` (if another `<action>` opens before that close, the last opening wins);
with no closing tag, what follows the last `<action>`, because generation stops at the
`</action>` stop string, which the server trims (a trailing partial "</act" is removed too).

ALFWorld (`parse_alfworld_action`): the content must equal an admissible command after
lower-casing, collapsing whitespace and stripping surrounding quotes and a final period. With
`lenient=True` a number refers to the 1-based numbered list of admissible commands ("3", "3.",
"3)"), a numbered command ("3. go to desk 1") is matched on its text, and when the whole content
does not match, its first non-empty line is tried the same way (small models keep writing after
the action). With `number_first=True` (the "number" answer format, lenient only) a content that
starts with a number of the list picks that command whatever follows it ("4 people", "2: fly",
"12=>" with 12 listed): the number is the answer asked for, and what a small model writes after
it is noise. A non-admissible
action keeps the raw content in `action` so that it can be sent as-is (the game then answers
"Nothing happens.").

Mind2Web (`parse_web_action`): the tag content is a JSON object `{"op", "ref", "value"}` (the
first `{...}` span when the content has text around it) or a line `OP eN` / `OP eN | value`
(`:` accepted for `|`, the ref optionally in brackets). The op is upper-cased, HOVER and ENTER
become CLICK, and it must be CLICK, TYPE or SELECT; the ref must read `eN` (`[eN]` and `ref=eN`
accepted); TYPE and SELECT need a non-empty value, CLICK drops any value; whitespace in the value
is collapsed. Anything else is `malformed_action`, never an exception.
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
_LEADING_NUMBER = re.compile(r"(\d{1,6})(?!\d)")


class ActionStatus(StrEnum):
    OK = "ok"
    NO_ACTION_TAG = "no_action_tag"
    EMPTY_ACTION = "empty_action"
    NOT_ADMISSIBLE = "not_admissible"
    MALFORMED_ACTION = "malformed_action"


@dataclass(frozen=True)
class ActionParse:
    """`action` is the command to send (canonical if ok, raw if not admissible)."""

    ok: bool
    action: str | None
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


def _listed(number: int, admissible: Sequence[str]) -> str | None:
    """The command numbered `number` in the 1-based list, if there is one."""
    return admissible[number - 1] if 1 <= number <= len(admissible) else None


def _numbered_command(content: str, admissible: Sequence[str], known: dict[str, str]) -> str | None:
    numbered = _NUMBERED.fullmatch(content)
    if numbered is None:
        return None
    number, rest = int(numbered.group(1)), numbered.group(2)
    if rest:
        return known.get(_normalise_command(rest))
    return _listed(number, admissible)


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


def _leading_number_command(content: str, admissible: Sequence[str]) -> str | None:
    lead = _LEADING_NUMBER.match(content)
    return _listed(int(lead.group(1)), admissible) if lead is not None else None


def parse_alfworld_action(
    text: str, admissible: Sequence[str], *, lenient: bool = False, number_first: bool = False
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
    if command is None and lenient and number_first:
        command = _leading_number_command(content, admissible)
    if command is None and lenient:
        command = _lenient_command(content, admissible, known)
    if command is None:
        return ActionParse(False, content, ActionStatus.NOT_ADMISSIBLE)
    return ActionParse(True, command, ActionStatus.OK)


WEB_OPS = ("CLICK", "TYPE", "SELECT")
_WEB_ALIASES = {"HOVER": "CLICK", "ENTER": "CLICK"}
_WEB_LINE = re.compile(r"(?P<op>[A-Za-z]+)\s+(?P<ref>\[?(?:ref=)?e\d+\]?)"
                       r"(?:\s*[|:]\s*(?P<value>.*))?", re.DOTALL | re.IGNORECASE)
_WEB_REF = re.compile(r"\[?(?:ref=)?(e\d+)\]?", re.IGNORECASE)
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
