"""Finding the skill's JSON object in free model text, and choosing one among several.

Owns `find_skill_object(text, schema_keys)`. Where objects are looked for:
  1. the whole text as JSON: an object there is returned at once, as the reference does
     (Fanzy27/Evolving-RL src/alfworld/prompts.py:334-340);
  2. fenced ``` blocks (with or without a language tag), at most `MAX_FENCED_BLOCKS`;
  3. JSON objects starting at a `{` anywhere in the text. Each start is decoded with
     `json.JSONDecoder.raw_decode`, which respects strings and escapes (braces inside strings
     never count), ignores what follows the object, and runs in C; starts inside an object
     already decoded are skipped and at most `MAX_OBJECT_STARTS` starts are tried, so a 50 KB
     output costs a few linear passes.
Among the objects of 2 and 3 the reference's rank chooses (prompts.py:330-332): the most keys
of the format's schema (counted inside a one-key wrapper such as {"skill": {...}}), then the
longer raw text, then the later end position. The caller validates only the chosen object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from evolving_rl.core.skill_fields import unwrap

MAX_OBJECT_STARTS = 32  # `{` positions tried by the object search
MAX_FENCED_BLOCKS = 16

_FENCE = "```"
_FENCE_TAG = re.compile(r"[ \t]*[A-Za-z0-9_+-]*[ \t]*(?:\n|(?=\{))")
_DECODER = json.JSONDecoder()

# (object, raw text length, end position) of one candidate
_Found = tuple[dict[str, Any], int, int]


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _fenced_objects(text: str) -> Iterator[_Found]:
    """Objects that are the whole body of a ``` pair (language tag line removed)."""
    marks: list[int] = []
    pos = text.find(_FENCE)
    while pos != -1 and len(marks) < 2 * MAX_FENCED_BLOCKS:
        marks.append(pos)
        pos = text.find(_FENCE, pos + len(_FENCE))
    for start, end in zip(marks[::2], marks[1::2], strict=False):
        body = text[start + len(_FENCE) : end]
        tag = _FENCE_TAG.match(body)
        body = (body[tag.end() :] if tag else body).strip()
        obj = _loads_object(body)
        if obj is not None:
            yield obj, len(body), end


def _embedded_objects(text: str) -> Iterator[_Found]:
    """Objects decoded from `{` positions (see the module docstring)."""
    pos = text.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if pos == -1:
            return
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        yield obj, end - pos, end
        pos = text.find("{", end)  # starts inside a decoded object are skipped


def find_skill_object(text: str, schema_keys: frozenset[str]) -> dict[str, Any] | None:
    """The object to validate, or None when the text holds no JSON object. A wrapper is
    ranked by the keys of the object it wraps and returned as found (validators unwrap)."""
    direct = _loads_object(text)
    if direct is not None:
        return direct
    best: dict[str, Any] | None = None
    best_rank: tuple[int, int, int] | None = None
    for obj, raw_length, end in (*_fenced_objects(text), *_embedded_objects(text)):
        rank = (len(schema_keys & unwrap(obj).keys()), raw_length, end)
        if best_rank is None or rank > best_rank:
            best, best_rank = obj, rank
    return best
