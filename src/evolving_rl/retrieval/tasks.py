"""Task rows of the retrieval index, from the prepared split files (`retrieval.prepared`).

The same task id may sit in several split files (ALFWorld's `train` holds `train_seen` and
`train_unseen`): it becomes one `TaskRow` listing all its splits, so it is embedded once and
filtered by split membership.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from evolving_rl.retrieval.prepared import PreparedDataError, PreparedRow, read_prepared_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskRow:
    """One indexed task: what retrieval returns about it."""

    id: str
    question: str
    task_type: str
    splits: tuple[str, ...]


def load_task_rows(prepared_dir: str | Path, splits: list[str] | None = None) -> list[TaskRow]:
    """Read the given splits (all present when None) into unique rows (`task_rows`)."""
    rows = task_rows(read_prepared_dir(prepared_dir, splits))
    logger.info("read %d unique tasks in %s", len(rows), prepared_dir)
    return rows


def task_rows(by_split: dict[str, list[PreparedRow]]) -> list[TaskRow]:
    """Split name -> rows as unique rows, in first-seen order.

    A task id seen in several splits must carry the same question and task type everywhere.
    """
    seen: dict[str, tuple[str, str, list[str]]] = {}
    for split, rows in by_split.items():
        for row in rows:
            known = seen.get(row.id)
            if known is None:
                seen[row.id] = (row.question, row.task_type, [split])
            elif known[:2] != (row.question, row.task_type):
                raise PreparedDataError(f"split '{split}': task '{row.id}' differs from its "
                                        f"row in split '{known[2][0]}'")
            elif split not in known[2]:
                known[2].append(split)
    return [TaskRow(task_id, question, task_type, tuple(split_list))
            for task_id, (question, task_type, split_list) in seen.items()]
