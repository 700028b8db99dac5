"""What one evaluated case leaves behind: JSON-able records, and the file that keeps them.

Owns `ArmRecord` (one episode of a test task: status, score, success, steps and the
environment's per-episode measures, `EnvironmentAdapter.episode_measures`), `CaseRecord` (one
test task in one repeat under one protocol: the task retrieved for it, whether a skill was
obtained, a note on how the skill came or why none did, and its two arms) and `CaseStore` (an
append-only JSONL file of finished cases, read back on a restart so that finished cases are not
run again; with a key, only cases computed from the same policy, settings and data are read
back). The report is computed from the records alone (`pipeline.eval_report`), so an
interrupted and resumed run reports exactly what an uninterrupted one does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

ARMS = ("with_skill", "without_skill")
CaseKey = tuple[str, str, str, int]  # protocol, split, task id, repeat
KEY_FIELD = "cases_key"  # the first line of a keyed store: {"cases_key": ...}


@dataclass(frozen=True)
class ArmRecord:
    """One episode of a test task; `score` None: it failed for an infrastructure reason."""

    status: str
    score: float | None
    success: bool
    n_steps: int
    measures: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        return self.score is not None


@dataclass(frozen=True)
class CaseRecord:
    """One test task in one repeat under one protocol.

    Without a skill (no text came: a failed generation, or an unusable skill under
    `pipeline.unusable_skills: skip`) the "with skill" arm is the plain episode (nothing was
    injected), as the reference counts it; `with_skill` is then None and `arm("with_skill")`
    the plain one. `skill_note` (None: nothing to note) names what went unlike the protocol
    intends, e.g. an expert trajectory missing or not won (`pipeline.evaluation` NOTE_*).
    """

    protocol: str
    split: str
    task_id: str
    task_type: str
    repeat: int
    retrieved_id: str | None
    skill_obtained: bool
    without_skill: ArmRecord
    with_skill: ArmRecord | None = None
    skill_note: str | None = None

    @property
    def key(self) -> CaseKey:
        return (self.protocol, self.split, self.task_id, self.repeat)

    def arm(self, name: str) -> ArmRecord:
        if name not in ARMS:
            raise ValueError(f"unknown arm {name!r}")
        if name == "with_skill" and self.with_skill is not None:
            return self.with_skill
        return self.without_skill

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseRecord:
        with_skill = data.get("with_skill")
        return cls(**{**data, "without_skill": ArmRecord(**data["without_skill"]),
                      "with_skill": ArmRecord(**with_skill) if with_skill else None})


class CaseStore:
    """Finished cases of one evaluation run, one JSON line each (appended as they finish).

    With a `key` (what the cases are computed from: `evaluate.provenance`) the file starts with a
    line `{"cases_key": ...}`, and a file of another key, or of none (written before cases were
    keyed), is not read: `load` returns nothing and says why, and `set_aside` renames it to
    `cases-<its key>.jsonl` (`cases-unkeyed.jsonl`) so that cases of two keys never mix."""

    def __init__(self, path: str | Path, key: str | None = None) -> None:
        self.path = Path(path)
        self.key = key

    def stored_key(self) -> str | None:
        """The key the file was written under; None: no file, or a file without a key line."""
        if not self.path.is_file():
            return None
        with self.path.open(encoding="utf-8") as handle:
            try:
                first = json.loads(handle.readline() or "{}")
            except json.JSONDecodeError:
                return None
        return first.get(KEY_FIELD) if isinstance(first, dict) else None

    def _foreign(self) -> str | None:
        """Why the file's cases are not this store's (None: they are, or there are none)."""
        if self.key is None or not self.path.is_file() or self.path.stat().st_size == 0:
            return None
        stored = self.stored_key()
        if stored == self.key:
            return None
        if stored is None:
            return "it has no key (written before cases were keyed by what was evaluated)"
        return f"it was computed from another policy, config or data (key {stored}, not {self.key})"

    def set_aside(self) -> Path | None:
        """Rename a file of another key out of the way; returns where it went (None: kept)."""
        why = self._foreign()
        if why is None:
            return None
        stem = f"{self.path.stem}-{self.stored_key() or 'unkeyed'}"
        target = self.path.with_name(f"{stem}{self.path.suffix}")
        number = 1
        while target.exists():
            number += 1
            target = self.path.with_name(f"{stem}-{number}{self.path.suffix}")
        self.path.rename(target)
        logger.warning("%s set aside as %s: %s", self.path, target.name, why)
        return target

    def load(self) -> dict[CaseKey, CaseRecord]:
        """Every finished case; a torn last line (the run was killed mid-write) is dropped."""
        records: dict[CaseKey, CaseRecord] = {}
        why = self._foreign()
        if why is not None:
            logger.warning("the cases in %s are not reused: %s", self.path, why)
            return records
        if not self.path.is_file():
            return records
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    if number == 1 and KEY_FIELD in data:
                        continue
                    record = CaseRecord.from_json(data)
                except (json.JSONDecodeError, TypeError, KeyError) as error:
                    logger.warning("%s:%d: unreadable case dropped (%s)", self.path, number, error)
                    continue
                records[record.key] = record
        return records

    def _torn(self) -> bool:
        """Whether the file ends inside a line (its last byte only is read)."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return False
        with self.path.open("rb") as handle:
            handle.seek(-1, 2)
            return handle.read(1) != b"\n"

    def append(self, records: Iterable[CaseRecord]) -> None:
        lines = [json.dumps(record.to_json(), ensure_ascii=False) for record in records]
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.key is not None and not (self.path.is_file() and self.path.stat().st_size):
            lines.insert(0, json.dumps({KEY_FIELD: self.key}))
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(("\n" if self._torn() else "") + "\n".join(lines) + "\n")
            handle.flush()
