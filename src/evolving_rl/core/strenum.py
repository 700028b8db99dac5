"""A `str`-valued Enum whose members print as their value (the stdlib StrEnum needs 3.11).

Core status and reason enums derive from it so that `status == "ok"`, `f"{status}"` and JSON
serialisation all see the plain string.
"""

from enum import Enum


class StrEnum(str, Enum):
    """Enum of strings; `str(member)` and `format(member)` give the value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)
