"""The skill library of a run: every extracted skill, appended to one JSONL file.

Owns `SkillRecord` (source task, extractor output, the skill format, parse and audit result,
the skill in its JSON form, its downstream scores and extractor reward) and `SkillLibrary`
(append after each rollout, read back, best usable skill per source task for evaluation with a
persisted library; `best_by_source` applies that rule to any records, e.g. an export's).

Every record is checked by type when read and when written (`check_record`: `"parse_ok":
"false"`, a NaN or boolean reward, a skill that is no object are refused with
`SkillLibraryError` naming the file, line and field); a torn last line (a run killed mid-write)
is dropped with a warning, as the other JSONL readers do.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

FILE_NAME = "skill_library.jsonl"
MAX_RAW_CHARS = 4000  # raw extractor text kept per record
LEGACY_FORMAT = "compact"  # the only format before the reference one


@dataclass(frozen=True)
class SkillRecord:
    """One extracted skill and what became of it."""

    rollout: str
    source_id: str
    source_question: str
    source_task_type: str
    source_success: bool
    skill_index: int
    skill_format: str  # a core SkillFormat value: how `skill` validates back
    status: str  # sample status of the extractor generation
    parse_ok: bool
    parse_reason: str
    audit_ok: bool
    audit_rule: str | None
    audit_detail: str
    skill: dict[str, Any] | None
    raw_text: str
    downstream_ids: list[str]
    downstream_scores: list[float | None]
    reward: float | None
    reward_status: str

    @property
    def usable(self) -> bool:
        return self.parse_ok and self.audit_ok and self.skill is not None


class SkillLibraryError(ValueError):
    """A library line that is no valid record (the message names the file, line and field)."""


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


# field -> (is its value valid, what it must be)
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{name: (lambda v: isinstance(v, str), "a string") for name in (
        "rollout", "source_id", "source_question", "source_task_type", "skill_format", "status",
        "parse_reason", "audit_detail", "raw_text", "reward_status")},
    **{name: (lambda v: isinstance(v, bool), "true or false") for name in (
        "source_success", "parse_ok", "audit_ok")},
    "skill_index": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "audit_rule": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "skill": (lambda v: v is None or isinstance(v, dict), "a JSON object or null"),
    "downstream_ids": (lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
                       "a list of strings"),
    "downstream_scores": (lambda v: isinstance(v, list) and all(i is None or _number(i)
                                                                for i in v),
                          "a list of finite numbers or nulls"),
    "reward": (lambda v: v is None or _number(v), "a finite number or null"),
}


def check_record(row: Any) -> str | None:
    """What is wrong with `row` as a record's JSON form (the first field found), or None."""
    if not isinstance(row, dict):
        return "not a JSON object"
    unknown = sorted(row.keys() - _CHECKS.keys())
    if unknown:
        return f"unknown field {unknown[0]!r}"
    for name, (valid, must_be) in _CHECKS.items():
        if name not in row:
            return f"field {name!r} is missing"
        if not valid(row[name]):
            return f"field {name!r} must be {must_be}, got {json.dumps(row[name])[:60]}"
    return None


def _record(row: dict[str, Any]) -> SkillRecord:
    """A record read back; libraries written before `skill_format` existed held compact skills."""
    return SkillRecord(**{"skill_format": LEGACY_FORMAT, **row})


def _parsed(path: Path, number: int, line: str, last: bool) -> SkillRecord | None:
    """The record on line `number`, None for a torn last line (dropped with a warning);
    `SkillLibraryError` naming the file, line and field for any other bad line."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        if last and not line.endswith("\n"):
            logger.warning("%s:%d: torn last line dropped (%s)", path, number, error)
            return None
        raise SkillLibraryError(f"{path}:{number}: not JSON ({error.msg})") from None
    if isinstance(row, dict):
        row = {"skill_format": LEGACY_FORMAT, **row}
    problem = check_record(row)
    if problem:
        raise SkillLibraryError(f"{path}:{number}: {problem}")
    return _record(row)


class SkillLibrary:
    """A JSONL store under a run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def in_run_dir(cls, run_dir: str | Path) -> SkillLibrary:
        return cls(Path(run_dir) / FILE_NAME)

    def append(self, records: Iterable[SkillRecord]) -> int:
        """Append records (one line each); returns how many were written. A record of the
        wrong types (a NaN reward, say) is refused with `SkillLibraryError` before any is."""
        rows = [asdict(record) for record in records]
        for row in rows:
            problem = check_record(row)
            if problem:
                raise SkillLibraryError(f"{self.path}: refused to write a record: {problem}")
        lines = [json.dumps(row, ensure_ascii=False) for row in rows]
        if not lines:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        return len(lines)

    def load(self) -> list[SkillRecord]:
        """Every record so far (an absent file is an empty library), each checked by type
        (`check_record`); a torn last line is dropped with a warning."""
        if not self.path.is_file():
            return []
        with self.path.open(encoding="utf-8") as handle:
            lines = handle.readlines()
        records = [_parsed(self.path, number, line, number == len(lines))
                   for number, line in enumerate(lines, 1) if line.strip()]
        return [record for record in records if record is not None]

    def best_by_source(self) -> dict[str, SkillRecord]:
        """The usable skill with the highest reward for each source task id."""
        return best_by_source(self.load())


def best_by_source(records: Iterable[SkillRecord]) -> dict[str, SkillRecord]:
    """The usable skill with the highest reward for each source task id (ties: the earlier)."""
    best: dict[str, SkillRecord] = {}
    for record in records:
        if not record.usable or record.reward is None:
            continue
        current = best.get(record.source_id)
        if current is None or record.reward > (current.reward or 0.0):
            best[record.source_id] = record
    return best
