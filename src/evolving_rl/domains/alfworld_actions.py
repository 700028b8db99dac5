"""ALFWorld's reading of the `<action>` tag: the admissible command it names.

Owns `parse_alfworld_action` and its record `ActionParse`. The tag content (`core.actions`) must
equal an admissible command after lower-casing, collapsing whitespace and stripping surrounding
quotes and a final period. With `lenient=True` a number refers to the 1-based numbered list of
admissible commands ("3", "3.", "3)"), a numbered command ("3. go to desk 1") is matched on its
text, and when the whole content does not match, its first non-empty line is tried the same way
(small models keep writing after the action). With `number_first=True` (the "number" answer
format, lenient only) a content that starts with a number of the list picks that command whatever
follows it ("4 people", "2: fly", "12=>" with 12 listed): the number is the answer asked for, and
what a small model writes after it is noise. A non-admissible action keeps the raw content in
`action` so that it can be sent as-is (the game then answers "Nothing happens.").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from evolving_rl.core.actions import ActionStatus, extract_action

_NUMBERED = re.compile(r"(\d+)\s*[.):]?\s*(.*)", re.DOTALL)
_LEADING_NUMBER = re.compile(r"(\d{1,6})(?!\d)")


@dataclass(frozen=True)
class ActionParse:
    """`action` is the command to send (canonical if ok, raw if not admissible)."""

    ok: bool
    action: str | None
    status: ActionStatus


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
