"""Settings fields that carry their own range: a default and its bounds declared once.

Owns `bounded` (a dataclass field whose metadata holds its bounds), `check_bounds` (what a
settings dataclass calls in `__post_init__`) and `FieldError`, the `ValueError` naming the field.
The config schema declares its fields with the same `bounded` and embeds core settings types, so
the loader checks the same bounds on a YAML value (`evolving_rl.config.loader`) and reports a
`FieldError` under the field's config key.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

BOUNDS = "bounds"  # the field metadata key
_OPS = {"ge": (operator.ge, ">="), "gt": (operator.gt, ">"), "le": (operator.le, "<="),
        "lt": (operator.lt, "<")}


class FieldError(ValueError):
    """The value of settings field `field` is out of range; `message` says how."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.message = message


def bounded(default: Any, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None) -> Any:
    """A dataclass field with a default and numeric bounds."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    return dataclasses.field(default=default, metadata={BOUNDS: bounds})


def bound_violation(value: Any, bounds: dict[str, float]) -> str | None:
    """How `value` breaks `bounds` ("must be >= 2, got 1"), or None when it keeps them."""
    for name, bound in bounds.items():
        check, symbol = _OPS[name]
        if not check(value, bound):
            return f"must be {symbol} {bound}, got {value!r}"
    return None


def check_bounds(settings: Any) -> None:
    """Raise `FieldError` for the first field of dataclass `settings` outside its bounds."""
    for field in dataclasses.fields(settings):
        message = bound_violation(getattr(settings, field.name), field.metadata.get(BOUNDS, {}))
        if message:
            raise FieldError(field.name, message)
