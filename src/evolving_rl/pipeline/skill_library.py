"""The skill library of a run: every extracted skill, appended to one JSONL file.

Owns `SkillRecord` (source task, extractor output, the skill format, parse and audit result,
the skill in its JSON form, its downstream scores and extractor reward) and `SkillLibrary`
(append after each rollout, read back, best usable skill per source task for evaluation with a
persisted library; `best_by_source` applies that rule to any records, e.g. an export's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
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


def _record(row: dict[str, Any]) -> SkillRecord:
    """A record read back; libraries written before `skill_format` existed held compact skills."""
    return SkillRecord(**{"skill_format": LEGACY_FORMAT, **row})


class SkillLibrary:
    """A JSONL store under a run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def in_run_dir(cls, run_dir: str | Path) -> SkillLibrary:
        return cls(Path(run_dir) / FILE_NAME)

    def append(self, records: Iterable[SkillRecord]) -> int:
        """Append records (one line each); returns how many were written."""
        lines = [json.dumps(asdict(record), ensure_ascii=False) for record in records]
        if not lines:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        return len(lines)

    def load(self) -> list[SkillRecord]:
        """Every record so far (an absent file is an empty library)."""
        if not self.path.is_file():
            return []
        with self.path.open(encoding="utf-8") as handle:
            return [_record(json.loads(line)) for line in handle if line.strip()]

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
