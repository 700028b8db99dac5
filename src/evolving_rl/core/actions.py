"""The `<action>` tag every environment's reply carries, and the statuses of parsing it.

Owns `extract_action` and `ActionStatus`. Tag rule (tags case-insensitive, content stripped): the
first complete `<action>...</action>` (if another `<action>` opens before that close, the last
opening wins); with no closing tag, what follows the last `<action>`, because generation stops at
the `</action>` stop string, which the server trims (a trailing partial "</act" is removed too).
Each environment reads the content its own way (`domains/alfworld_actions.py`,
`domains/mind2web_actions.py`).
"""

from __future__ import annotations

import re

from evolving_rl.core.strenum import StrEnum

_OPEN = re.compile(r"<action>", re.IGNORECASE)
_CLOSE = re.compile(r"</action>", re.IGNORECASE)
_CLOSE_TAG = "</action>"


class ActionStatus(StrEnum):
    OK = "ok"
    NO_ACTION_TAG = "no_action_tag"
    EMPTY_ACTION = "empty_action"
    NOT_ADMISSIBLE = "not_admissible"
    MALFORMED_ACTION = "malformed_action"


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
