"""Task rows of the retrieval index, read from the prepared split files.

Owns the prepared-dataset contract as the retrieval side sees it: `<prepared_dir>/<split>.jsonl`,
one JSON object per line with `id`, `question` and `metadata.task_type`. The same task id may sit
in several split files (ALFWorld's `train` holds `train_seen` and `train_unseen`): it becomes one
`TaskRow` listing all its splits, so it is embedded once and filtered by split membership.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


class TaskDataError(ValueError):
    """A prepared split file is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class TaskRow:
    """One indexed task: what retrieval returns about it."""

    id: str
    question: str
    task_type: str
    splits: tuple[str, ...]


def _parse_line(path: Path, lineno: int, line: str) -> tuple[str, str, str]:
    """Return (id, question, task_type) of one JSONL line, or raise naming file and line."""
    where = f"{path}:{lineno}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise TaskDataError(f"{where}: invalid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise TaskDataError(f"{where}: expected a JSON object")
    task_id, question = record.get("id"), record.get("question")
    metadata = record.get("metadata") or {}
    if not isinstance(task_id, str) or not task_id:
        raise TaskDataError(f"{where}: 'id' must be a non-empty string")
    if not isinstance(question, str) or not question.strip():
        raise TaskDataError(f"{where}: 'question' must be a non-empty string")
    if not isinstance(metadata, dict):
        raise TaskDataError(f"{where}: 'metadata' must be an object")
    task_type = metadata.get("task_type", "")
    if not isinstance(task_type, str):
        raise TaskDataError(f"{where}: 'metadata.task_type' must be a string")
    return task_id, question, task_type


def available_splits(prepared_dir: str | Path) -> list[str]:
    """Names of the split files present in `prepared_dir`, sorted."""
    return sorted(p.stem for p in Path(prepared_dir).glob("*.jsonl"))


def load_task_rows(prepared_dir: str | Path, splits: list[str] | None = None) -> list[TaskRow]:
    """Read the given splits (all present when None) into unique rows, in first-seen order.

    A task id seen in several splits must carry the same question and task type everywhere.
    """
    prepared_dir = Path(prepared_dir)
    names = list(splits) if splits else available_splits(prepared_dir)
    if not names:
        raise TaskDataError(f"no <split>.jsonl files in {prepared_dir}")
    seen: dict[str, tuple[str, str, list[str]]] = {}
    for split in names:
        path = prepared_dir / f"{split}.jsonl"
        if not path.is_file():
            raise TaskDataError(f"split file not found: {path}")
        with path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                task_id, question, task_type = _parse_line(path, lineno, line)
                known = seen.get(task_id)
                if known is None:
                    seen[task_id] = (question, task_type, [split])
                elif known[:2] != (question, task_type):
                    raise TaskDataError(f"{path}:{lineno}: task '{task_id}' differs from its "
                                        f"row in split '{known[2][0]}'")
                elif split not in known[2]:
                    known[2].append(split)
    logger.info("read %d unique tasks from %d splits in %s", len(seen), len(names), prepared_dir)
    return [TaskRow(task_id, question, task_type, tuple(split_list))
            for task_id, (question, task_type, split_list) in seen.items()]
