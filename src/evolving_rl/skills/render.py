"""How the commands print records: a fixed-width table, JSON rows, and one skill's card.

Owns the text only; the command line writes it to stdout. The card is rendered by
`core.skill` after validating the record's skill in the format the record names; a record
without a valid skill shows its raw extractor text instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from evolving_rl.core.skill import render_skill_card, validate_skill
from evolving_rl.pipeline.skill_library import SkillRecord
from evolving_rl.skills.select import skill_id

COLUMNS = ("row", "id", "task_type", "reward", "audit", "usable", "name")
NAME_WIDTH = 48


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _audit(record: SkillRecord) -> str:
    if not record.parse_ok:
        return f"unparsed:{record.parse_reason}"
    return "ok" if record.audit_ok else f"failed:{record.audit_rule}"


def _name(record: SkillRecord) -> str:
    name = (record.skill or {}).get("name", "")
    name = name if isinstance(name, str) else ""
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 3] + "..."


def _cells(row: int, record: SkillRecord) -> list[str]:
    return [str(row), skill_id(record), record.source_task_type, _reward(record.reward),
            _audit(record), "yes" if record.usable else "no", _name(record)]


def table(records: Sequence[SkillRecord], rows: Mapping[int, int],
          scores: Sequence[float] | None = None) -> str:
    """One line per record, columns padded to their widest cell; `rows`: each record's library
    row, by `id(record)` (`select.library_rows`); `scores` adds a first column."""
    header = [*(["score"] if scores is not None else []), *COLUMNS]
    lines = [[*([f"{scores[i]:.4f}"] if scores is not None else []),
              *_cells(rows[id(record)], record)] for i, record in enumerate(records)]
    widths = [max(len(line[c]) for line in [header, *lines]) for c in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            for line in [header, *lines]]
    return "\n".join(line.rstrip() for line in text) + f"\n({len(records)} skills)\n"


def as_json(record: SkillRecord, row: int, score: float | None = None) -> dict[str, Any]:
    """The record as written in the library, plus its row, id, usability and any search score."""
    extra = {"score": score} if score is not None else {}
    return {"row": row, "id": skill_id(record), "usable": record.usable, **extra,
            **asdict(record)}


def card(record: SkillRecord) -> str:
    """`show`: what the record is, what it scored, then the card the solver would read."""
    scores = ", ".join(f"{task}={_reward(score)}" for task, score
                       in zip(record.downstream_ids, record.downstream_scores, strict=True))
    head = [f"id:          {skill_id(record)}",
            f"source task: {record.source_id} ({record.source_task_type}, "
            f"{'succeeded' if record.source_success else 'failed'}): {record.source_question}",
            f"format:      {record.skill_format} (generation {record.status}, "
            f"parse {record.parse_reason})",
            f"audit:       {_audit(record)} {record.audit_detail}".rstrip(),
            f"reward:      {_reward(record.reward)} ({record.reward_status})",
            f"downstream:  {scores or 'none'}", ""]
    parsed = validate_skill(record.skill, record.skill_format) if record.skill else None
    if parsed is not None and parsed.skill is not None:
        return "\n".join([*head, render_skill_card(parsed.skill)]) + "\n"
    raw = ["(no valid skill; the raw extractor text follows)", record.raw_text]
    return "\n".join([*head, *raw]) + "\n"
