"""Exact in-memory search over the cached task vectors.

Owns scoring and top-k selection: cosine similarity as a dot product of normalised vectors (one
matmul per batch of queries), filters (split membership, task types, excluded ids) as boolean
masks, and a top-k that equals a full stable sort: ordered by score (descending for
"most_similar", ascending for "least_similar"), ties broken by index position.

Scores are the same whatever BLAS kernel runs and however queries are batched: the product is
computed in float64 and rounded to float32. Two kernels (batched GEMM vs per-query GEMV, or two
CPUs) differ only in the last bits of a float64 result, far below float32's resolution, so the
rounding absorbs them: exact-duplicate vectors score exactly alike and their tie breaks by
position. (A float32 product differs in float32's own last bits between kernels, which reordered
ties across CPUs.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evolving_rl.retrieval.cache import EmbeddingCache
from evolving_rl.retrieval.tasks import TaskRow

Order = Literal["most_similar", "least_similar"]


@dataclass(frozen=True)
class Hit:
    """One retrieved task."""

    id: str
    question: str
    splits: tuple[str, ...]
    task_type: str
    score: float


@dataclass(frozen=True)
class SearchFilter:
    """Which rows a query may return. None means no restriction. `exclude_ids` may be one set
    shared by every filter of a request (held once, its mask computed once); `also_exclude_ids`
    are the query's own, applied to a copy of that mask while the query is searched."""

    split: str | None = None
    task_types: tuple[str, ...] | None = None
    exclude_ids: frozenset[str] = frozenset()
    also_exclude_ids: frozenset[str] = frozenset()


def top_k_positions(keys: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest `keys`, ties by lower position: equal to a stable full sort.

    Rows to skip must carry -inf and `k` must not exceed the number of finite keys.
    """
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < keys.size:
        part = np.argpartition(-keys, k - 1)[:k]
        candidates = np.flatnonzero(keys >= keys[part].min())
    else:
        candidates = np.arange(keys.size)
    order = np.lexsort((candidates, -keys[candidates]))
    return candidates[order[:k]]


class SearchIndex:
    """Vectors and rows of one cache, with precomputed filter masks."""

    def __init__(self, cache: EmbeddingCache) -> None:
        self.model = cache.model
        self.rows: tuple[TaskRow, ...] = cache.rows
        self.vectors = np.ascontiguousarray(cache.vectors, dtype=np.float32)
        self._vectors64 = self.vectors.astype(np.float64)
        self.position = {row.id: i for i, row in enumerate(self.rows)}
        self.by_question: dict[str, int] = {}
        for i, row in enumerate(self.rows):
            self.by_question.setdefault(row.question, i)
        self.split_masks = self._masks(lambda row: row.splits)
        self.type_masks = self._masks(lambda row: (row.task_type,))

    def _masks(self, labels: Callable[[TaskRow], Iterable[str]]) -> dict[str, np.ndarray]:
        masks: dict[str, np.ndarray] = {}
        for i, row in enumerate(self.rows):
            for label in labels(row):
                masks.setdefault(label, np.zeros(len(self.rows), dtype=bool))[i] = True
        return masks

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def dimension(self) -> int:
        return int(self.vectors.shape[1])

    def allowed(self, flt: SearchFilter) -> np.ndarray:
        """Boolean mask of the rows `flt` admits (unknown names admit nothing)."""
        return self._without(self._shared_mask(flt), flt.also_exclude_ids)

    def _without(self, mask: np.ndarray, ids: frozenset[str]) -> np.ndarray:
        """`mask` with the rows of `ids` cleared (a copy when any is; `mask` itself else)."""
        rows = [self.position[task_id] for task_id in ids if task_id in self.position]
        if not rows:
            return mask
        mask = mask.copy()
        mask[rows] = False
        return mask

    def _shared_mask(self, flt: SearchFilter) -> np.ndarray:
        """The mask of `flt` without its `also_exclude_ids`."""
        mask = np.ones(self.size, dtype=bool)
        if flt.split is not None:
            mask &= self.split_masks.get(flt.split, np.zeros(self.size, dtype=bool))
        if flt.task_types is not None:
            types = np.zeros(self.size, dtype=bool)
            for task_type in flt.task_types:
                types |= self.type_masks.get(task_type, False)
            mask &= types
        for task_id in flt.exclude_ids:
            if task_id in self.position:
                mask[self.position[task_id]] = False
        return mask

    def scores(self, queries: np.ndarray) -> np.ndarray:
        """Cosine scores of each query (row) against every vector: float64 product, rounded to
        float32 (see the module docstring)."""
        product = np.asarray(queries, dtype=np.float32).astype(np.float64) @ self._vectors64.T
        return product.astype(np.float32)

    def search(self, queries: np.ndarray, k: int, filters: list[SearchFilter],
               order: Order = "most_similar") -> list[list[Hit]]:
        """Top-k hits for each query vector (row of `queries`), one filter per query. Masks are
        kept per distinct shared part of the filters (one per request, as the server builds
        them), never per query: memory stays one mask per shared part plus one working copy."""
        scores = self.scores(queries)
        keys = scores if order == "most_similar" else -scores
        results = []
        shared: dict[tuple, np.ndarray] = {}
        for row_keys, row_scores, flt in zip(keys, scores, filters, strict=True):
            part = (flt.split, flt.task_types, flt.exclude_ids)
            if part not in shared:
                shared[part] = self._shared_mask(flt)
            mask = self._without(shared[part], flt.also_exclude_ids)
            masked = np.where(mask, row_keys, -np.inf)
            picked = top_k_positions(masked, min(k, int(mask.sum())))
            results.append([self._hit(int(i), float(row_scores[i])) for i in picked])
        return results

    def _hit(self, i: int, score: float) -> Hit:
        row = self.rows[i]
        return Hit(row.id, row.question, row.splits, row.task_type, score)


def brute_force_positions(scores: np.ndarray, mask: np.ndarray, k: int,
                          order: Order = "most_similar") -> np.ndarray:
    """Top-k by a full stable sort of `scores` (from `SearchIndex.scores`): the benchmark check."""
    keys = scores if order == "most_similar" else -scores
    allowed = np.flatnonzero(mask)
    return allowed[np.argsort(-keys[allowed], kind="stable")[:k]]
