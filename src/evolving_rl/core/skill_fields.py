"""What both skill formats share: stable failure reasons and field readers.

Owns `ParseReason`, `InvalidField` (raised by a reader, carrying its "<kind>:<field>" reason)
and the readers of JSON values: text (stripped; optionally with runs of whitespace collapsed to
one space), lists of strings (blank items dropped), and the one-key wrapper unwrap
({"skill": {...}} -> {...}). A reader never raises anything but `InvalidField`.
"""

from __future__ import annotations

from typing import Any

from evolving_rl.core.strenum import StrEnum


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


class InvalidField(Exception):
    """Raised by the field readers; carries the "<kind>:<field>" reason."""

    def __init__(self, kind: ParseReason, field: str) -> None:
        super().__init__(f"{kind}:{field}")


def unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """The inner object of a one-key wrapper such as {"skill": {...}}; else `obj` itself."""
    if "name" not in obj and len(obj) == 1:
        (inner,) = obj.values()
        if isinstance(inner, dict):
            return inner
    return obj


def read_text(value: object, field: str, limit: int, *, collapse: bool) -> str:
    """A string (None reads as ""), stripped, within `limit` characters."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidField(ParseReason.WRONG_TYPE, field)
    text = " ".join(value.split()) if collapse else value.strip()
    if len(text) > limit:
        raise InvalidField(ParseReason.TOO_LONG, field)
    return text


def required_text(obj: dict[str, Any], field: str, limit: int, *, collapse: bool) -> str:
    """A present, non-null string that is not blank."""
    if field not in obj:
        raise InvalidField(ParseReason.MISSING_FIELD, field)
    if obj[field] is None:
        raise InvalidField(ParseReason.WRONG_TYPE, field)
    text = read_text(obj[field], field, limit, collapse=collapse)
    if not text:
        raise InvalidField(ParseReason.EMPTY_FIELD, field)
    return text


def read_items(value: object, field: str, max_items: int, item_limit: int, *,
               collapse: bool) -> tuple[str, ...]:
    """A list of strings, blank items dropped; at most `max_items` of `item_limit` chars."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidField(ParseReason.WRONG_TYPE, field)
    items = tuple(text for text in (read_text(item, field, item_limit, collapse=collapse)
                                    for item in value) if text)
    if len(items) > max_items:
        raise InvalidField(ParseReason.TOO_LONG, field)
    return items
