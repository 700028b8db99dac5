"""Which records of a skill library a command shows or exports (pure functions).

Owns the record id (`rollout:source_id:skill_index`, e.g. `7:t0:2`) and what `show` accepts
for one (the record's row in the library, as `list` numbers it; the whole id; or a prefix of
exactly one id), the list filters (source task type, minimum reward, audit result, usable only),
the list order and the export selection. "Audit failed" means the skill parsed and its card
failed the language audit (an unparsed skill was never audited). Every order is stable: ties
keep library order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evolving_rl.pipeline.skill_library import SkillRecord, best_by_source

AuditFilter = Literal["ok", "failed", "any"]
SortKey = Literal["reward", "rollout"]
AUDIT_CHOICES = ("ok", "failed", "any")
SORT_CHOICES = ("reward", "rollout")
MAX_CANDIDATES = 10  # ids an ambiguous prefix lists


class SelectionError(ValueError):
    """A filter or id that cannot match the library; the message names it."""


@dataclass(frozen=True)
class RecordFilter:
    """What `list` and `search` keep; defaults keep every record."""

    task_type: str | None = None
    min_reward: float | None = None
    audit: AuditFilter = "any"
    usable_only: bool = False


def skill_id(record: SkillRecord) -> str:
    """The id `show` takes: rollout tag, source task id and skill index, joined by ':'."""
    return f"{record.rollout}:{record.source_id}:{record.skill_index}"


def _audit_matches(record: SkillRecord, audit: AuditFilter) -> bool:
    if audit == "ok":
        return record.audit_ok
    if audit == "failed":
        return record.parse_ok and not record.audit_ok
    return True


def _keeps(record: SkillRecord, flt: RecordFilter) -> bool:
    if flt.task_type is not None and record.source_task_type != flt.task_type:
        return False
    if flt.min_reward is not None and (record.reward is None or record.reward < flt.min_reward):
        return False
    return _audit_matches(record, flt.audit) and (record.usable or not flt.usable_only)


def check_task_type(records: Sequence[SkillRecord], task_type: str | None) -> None:
    """Refuse a task type that no record has (a typo would otherwise list nothing)."""
    known = sorted({record.source_task_type for record in records})
    if task_type is not None and task_type not in known:
        raise SelectionError(f"--task-type {task_type!r}: no record has it "
                             f"(task types here: {', '.join(known) or 'none'})")


def filter_records(records: Sequence[SkillRecord], flt: RecordFilter) -> list[SkillRecord]:
    """The records `flt` keeps, in library order."""
    check_task_type(records, flt.task_type)
    return [record for record in records if _keeps(record, flt)]


def sort_records(records: Sequence[SkillRecord], key: SortKey) -> list[SkillRecord]:
    """`rollout`: library (append) order; `reward`: highest first, unrewarded last."""
    if key == "rollout":
        return list(records)
    return sorted(records, key=lambda r: (r.reward is None, -(r.reward or 0.0)))


def library_rows(records: Sequence[SkillRecord]) -> dict[int, int]:
    """Each record's row in its library, 1 for the first, keyed by `id(record)`: the number
    `list` prints in its `row` column and `show` takes."""
    return {id(record): row for row, record in enumerate(records, start=1)}


def find_record(records: Sequence[SkillRecord], wanted: str) -> SkillRecord:
    """The record `wanted` names: a row number of the library (digits only: ids hold ':'), an
    id, or the start of one id (the first record of an id a library repeats)."""
    if wanted.isdigit():
        if not 1 <= int(wanted) <= len(records):
            raise SelectionError(f"no row {wanted}: the library has rows 1 to {len(records)}")
        return records[int(wanted) - 1]
    matches = {}
    for record in records:
        if skill_id(record).startswith(wanted):
            matches.setdefault(skill_id(record), record)
    if wanted in matches:
        return matches[wanted]
    if len(matches) == 1:
        return next(iter(matches.values()))
    if not matches:
        raise SelectionError(f"no skill with id {wanted!r} (give an id as `list` prints it, its "
                             "start, or its row number)")
    shown = sorted(matches)[:MAX_CANDIDATES]
    raise SelectionError(f"{wanted!r} starts {len(matches)} ids; give more of one:\n  "
                         + "\n  ".join(shown) + ("\n  ..." if len(matches) > len(shown) else ""))


def export_selection(records: Sequence[SkillRecord], top: int,
                     task_type: str | None = None) -> list[SkillRecord]:
    """The best usable skill of each source task (as evaluation picks it), `top` by reward."""
    check_task_type(records, task_type)
    kept = [r for r in records if task_type is None or r.source_task_type == task_type]
    return sort_records(list(best_by_source(kept).values()), "reward")[:top]
