"""Searching skill records by a query: full text, or embeddings of the retrieval encoder.

Text mode: the query's words (lower-cased runs of letters and digits) are looked up among the
words of a record's source question, task type and every string of its skill (its raw extractor
text when it has no skill); a query word is found when a word there starts with it ("flight"
finds "flights"), a record's score is how many distinct query words it holds, and records
holding none are left out. Embedding mode: each record is embedded as its source
question plus the skill's name and description (a compact skill's summary, else its
"applicable when"), the query with the encoder's query prompt; the score is the cosine, a
float64 product rounded to float32 as in `retrieval.index`. Both keep the `top_k` best, ties by
library order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evolving_rl.pipeline.skill_library import SkillRecord
from evolving_rl.retrieval.encoder import Encoder
from evolving_rl.retrieval.index import top_k_positions
from evolving_rl.skills.select import SelectionError

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class ScoredRecord:
    """A search result: the record and its score (matched words, or cosine)."""

    record: SkillRecord
    score: float


def words(text: str) -> set[str]:
    """The lower-cased words of `text`."""
    return {word.lower() for word in _WORD.findall(text)}


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def search_text(record: SkillRecord) -> str:
    """What text mode searches in a record."""
    body = list(_strings(record.skill)) if record.skill is not None else [record.raw_text]
    return "\n".join([record.source_question, record.source_task_type, *body])


def embedding_text(record: SkillRecord) -> str:
    """What embedding mode embeds for a record."""
    skill = record.skill or {}
    about = next((skill[key] for key in ("description", "summary", "applicable_when")
                  if isinstance(skill.get(key), str)), "")
    name = skill.get("name") if isinstance(skill.get("name"), str) else ""
    label = f"{name}: {about}" if name and about else name or about
    return "\n".join(part for part in (record.source_question, label) if part)


def _found(wanted: set[str], present: set[str]) -> int:
    """How many of `wanted` start some word of `present`."""
    return sum(1 for query in wanted if any(word.startswith(query) for word in present))


def _top(records: Sequence[SkillRecord], scores: np.ndarray, k: int) -> list[ScoredRecord]:
    keys = np.asarray(scores, dtype=np.float32)
    picked = top_k_positions(keys, min(k, int(np.isfinite(keys).sum())))
    return [ScoredRecord(records[i], float(keys[i])) for i in picked]


def text_search(records: Sequence[SkillRecord], query: str, k: int) -> list[ScoredRecord]:
    """Records by how many distinct query words they hold (at least one), ties by position."""
    wanted = words(query)
    if not wanted:
        raise SelectionError(f"search query {query!r} holds no words")
    counts = [_found(wanted, words(search_text(record))) for record in records]
    scores = np.array([float(c) if c else -np.inf for c in counts], dtype=np.float32)
    return _top(records, scores, k)


def embedding_search(records: Sequence[SkillRecord], query: str, k: int, encoder: Encoder,
                     show_progress: bool = False) -> list[ScoredRecord]:
    """Records by cosine between the query and `embedding_text` of each record."""
    if not query.strip():
        raise SelectionError("search query is blank")
    if not records:
        return []
    documents = encoder.encode_documents([embedding_text(record) for record in records],
                                         show_progress)
    queries = encoder.encode_queries([query])
    scores = (queries.astype(np.float64) @ documents.astype(np.float64).T)[0]
    return _top(records, scores.astype(np.float32), k)
