"""The embedding cache: task rows with their document vectors, keyed by model and text hash.

Owns the on-disk format and the incremental rebuild. One `.npz` file holds the L2-normalised
float32 `vectors` (one per row), the sha256 `hashes` of the embedded texts, and a JSON `meta`
blob (format version, model name, dimension, rows). A rebuild with the same model re-encodes only
texts whose hash is not in the previous cache. Saving writes a temporary file in the same folder
and renames it over the old one, so readers never see a half-written cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from evolving_rl.retrieval.encoder import Encoder
from evolving_rl.retrieval.tasks import TaskRow

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


class CacheError(RuntimeError):
    """The cache file is missing, unreadable, or does not fit the model it is used with."""


def text_hash(text: str) -> str:
    """Stable key of one embedded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class EmbeddingCache:
    """Rows and their vectors (row i ↔ vectors[i] ↔ hashes[i]) for one model."""

    model: str
    dimension: int
    rows: tuple[TaskRow, ...]
    hashes: tuple[str, ...]
    vectors: np.ndarray

    def vectors_by_hash(self) -> dict[str, np.ndarray]:
        return dict(zip(self.hashes, self.vectors, strict=True))


@dataclass(frozen=True)
class BuildStats:
    """What one (re)build did."""

    n_rows: int
    n_unique_texts: int
    n_encoded: int
    n_reused: int


def build_cache(rows: list[TaskRow], encoder: Encoder, previous: EmbeddingCache | None = None,
                show_progress: bool = True) -> tuple[EmbeddingCache, BuildStats]:
    """Embed the questions of `rows`, reusing `previous` vectors of the same model by text hash."""
    known: dict[str, np.ndarray] = {}
    if previous is not None and previous.model == encoder.name \
            and previous.dimension == encoder.dimension:
        known = previous.vectors_by_hash()
    elif previous is not None:
        logger.warning("previous cache was built with %s (%d-d); re-encoding everything with %s",
                       previous.model, previous.dimension, encoder.name)
    hashes = [text_hash(row.question) for row in rows]
    todo = {h: row.question for h, row in zip(hashes, rows, strict=True) if h not in known}
    if todo:
        logger.info("encoding %d new texts with %s", len(todo), encoder.name)
        fresh = encoder.encode_documents(list(todo.values()), show_progress=show_progress)
        known.update(zip(todo.keys(), fresh, strict=True))
    vectors = np.zeros((len(rows), encoder.dimension), dtype=np.float32)
    for i, h in enumerate(hashes):
        vectors[i] = known[h]
    unique = len(set(hashes))
    stats = BuildStats(len(rows), unique, len(todo), unique - len(todo))
    cache = EmbeddingCache(encoder.name, encoder.dimension, tuple(rows), tuple(hashes), vectors)
    return cache, stats


def save_cache(cache: EmbeddingCache, path: str | Path) -> None:
    """Write `cache` to `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT_VERSION, "model": cache.model, "dimension": cache.dimension,
            "rows": [asdict(row) for row in cache.rows]}
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, vectors=cache.vectors, hashes=np.array(cache.hashes, dtype=str),
                     meta=blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    logger.info("saved %d vectors (%s, %d-d) to %s", len(cache.rows), cache.model,
                cache.dimension, path)


def load_cache(path: str | Path) -> EmbeddingCache:
    """Read a cache written by `save_cache`; raise `CacheError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CacheError(f"embedding cache not found: {path} (build it with "
                         f"python -m evolving_rl.retrieval.build --config ...)")
    try:
        with np.load(path, allow_pickle=False) as data:
            vectors = np.asarray(data["vectors"], dtype=np.float32)
            hashes = tuple(str(h) for h in data["hashes"])
            meta = json.loads(data["meta"].tobytes().decode("utf-8"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        raise CacheError(f"unreadable embedding cache {path}: {err}") from None
    if meta.get("format") != FORMAT_VERSION:
        raise CacheError(f"{path}: cache format {meta.get('format')} != {FORMAT_VERSION}; rebuild")
    rows = tuple(TaskRow(r["id"], r["question"], r["task_type"], tuple(r["splits"]))
                 for r in meta["rows"])
    if vectors.shape != (len(rows), meta["dimension"]) or len(hashes) != len(rows):
        raise CacheError(f"{path}: inconsistent shapes; rebuild the cache")
    return EmbeddingCache(meta["model"], int(meta["dimension"]), rows, hashes, vectors)
