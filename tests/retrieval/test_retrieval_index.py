"""Prepared-split reading and exact search, without a model."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from retrieval_helpers import assert_valid_top_k

from evolving_rl.retrieval.cache import EmbeddingCache, text_hash
from evolving_rl.retrieval.index import (
    SearchFilter,
    SearchIndex,
    brute_force_positions,
    top_k_positions,
)
from evolving_rl.retrieval.prepared import PreparedDataError
from evolving_rl.retrieval.protocol import MEMORY_PER_BODY_BYTE, Limits, parse_search_request
from evolving_rl.retrieval.tasks import TaskRow, load_task_rows
from tests.fakes.synthetic_tasks import make_split_rows, write_prepared_splits


def test_rows_shared_by_splits_are_merged(tmp_path):
    counts = write_prepared_splits(tmp_path, 100)
    rows = load_task_rows(tmp_path)
    assert len(rows) == 100 < sum(counts.values())
    by_id = {row.id: row for row in rows}
    train_ids = {json.loads(line)["id"] for line in (tmp_path / "train.jsonl").open()}
    for task_id in train_ids:
        assert "train" in by_id[task_id].splits
        assert len(set(by_id[task_id].splits) & {"train_seen", "train_unseen"}) == 1
    assert len(load_task_rows(tmp_path, ["valid_seen"])) == counts["valid_seen"]


@pytest.mark.parametrize("line, message", [
    ("{not json", "invalid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"id": "", "question": "q"}', "'id'"),
    ('{"id": "a", "question": 3}', "'question'"),
    ('{"id": "a", "question": "q", "metadata": {"task_type": 1}}', "task_type"),
])
def test_malformed_rows_name_file_and_line(tmp_path, line, message):
    (tmp_path / "train.jsonl").write_text('{"id": "ok", "question": "fine"}\n' + line + "\n")
    with pytest.raises(PreparedDataError, match=f"train.jsonl:2: .*{message}"):
        load_task_rows(tmp_path)


def test_conflicting_rows_and_missing_splits_are_errors(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "x", "question": "one"}\n')
    (tmp_path / "b.jsonl").write_text('{"id": "x", "question": "two"}\n')
    with pytest.raises(PreparedDataError, match="differs"):
        load_task_rows(tmp_path)
    with pytest.raises(PreparedDataError, match="not found"):
        load_task_rows(tmp_path, ["nope"])
    with pytest.raises(PreparedDataError, match="no prepared <split>.jsonl"):
        load_task_rows(tmp_path / "empty")


def random_index(n: int = 500, dim: int = 16, seed: int = 0) -> SearchIndex:
    """Index over synthetic rows with random unit vectors, many of them exact duplicates."""
    rng = np.random.default_rng(seed)
    splits = make_split_rows(n)
    merged: dict[str, TaskRow] = {}
    for split, records in splits.items():
        for r in records:
            old = merged.get(r["id"])
            merged[r["id"]] = TaskRow(r["id"], r["question"], r["metadata"]["task_type"],
                                      (old.splits if old else ()) + (split,))
    rows = tuple(merged.values())
    base = rng.normal(size=(n // 5, dim)).astype(np.float32)
    vectors = base[rng.integers(0, len(base), size=n)]  # duplicates give exact score ties
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cache = EmbeddingCache("random", dim, rows, tuple(text_hash(r.question) for r in rows),
                           vectors)
    return SearchIndex(cache)


def test_top_k_positions_equals_stable_sort_with_ties():
    keys = np.array([0.5, 0.9, 0.5, 0.9, 0.1, 0.5, -np.inf, 0.9], dtype=np.float32)
    for k in range(1, 8):
        expected = np.argsort(-keys, kind="stable")[:k]
        assert top_k_positions(keys, k).tolist() == expected.tolist()


@pytest.mark.parametrize("order", ["most_similar", "least_similar"])
@pytest.mark.parametrize("flt", [
    SearchFilter(),
    SearchFilter(split="train"),
    SearchFilter(split="valid_unseen", task_types=("look_at_obj_in_light",
                                                   "pick_two_obj_and_place")),
    SearchFilter(exclude_ids=frozenset({"pick_and_place_simple-00003", "unknown-id"})),
])
def test_search_is_a_correct_top_k_with_position_ties(order, flt):
    index = random_index()
    rng = np.random.default_rng(1)
    queries = index.vectors[rng.integers(0, index.size, size=20)]  # exact ties with rows
    for k in (1, 5, 37, index.size + 10):
        results = index.search(queries, k, [flt] * len(queries), order)
        mask = index.allowed(flt)
        for query, hits in zip(queries, results, strict=True):
            picked = [index.position[h.id] for h in hits]
            assert_valid_top_k(picked, index.vectors, query, mask, k, order)
            assert all(flt.split in h.splits for h in hits) if flt.split else True
            assert not {h.id for h in hits} & flt.exclude_ids


def test_batched_and_single_queries_give_the_same_hits():
    """One query alone (a matrix-vector product) and inside a batch (a matrix product) run
    different BLAS kernels; the float64-then-float32 scores make their rankings agree."""
    index = random_index()
    queries = index.vectors[np.random.default_rng(2).integers(0, index.size, size=16)]
    batched = index.search(queries, 25, [SearchFilter()] * len(queries))
    for query, hits in zip(queries, batched, strict=True):
        (alone,) = index.search(query[None, :], 25, [SearchFilter()])
        assert [h.id for h in alone] == [h.id for h in hits]
        assert [h.score for h in alone] == pytest.approx([h.score for h in hits], abs=1e-6)


def test_brute_force_positions_is_a_stable_sort():
    scores = np.array([0.2, 0.7, 0.7, -0.1, 0.2], dtype=np.float32)
    mask = np.array([True, True, True, True, False])
    assert brute_force_positions(scores, mask, 3).tolist() == [1, 2, 0]
    assert brute_force_positions(scores, mask, 2, "least_similar").tolist() == [3, 0]


def test_unknown_filter_names_match_nothing():
    index = random_index()
    assert not index.allowed(SearchFilter(split="nope")).any()
    assert index.search(index.vectors[:1], 3, [SearchFilter(task_types=("nope",))]) == [[]]


def _peak_bytes(index: SearchIndex, raw: bytes) -> int:
    """Peak Python and numpy allocations of decoding, validating and searching one body."""
    limits = Limits(100, 256, 4096, frozenset(index.split_masks), frozenset(index.type_masks))
    tracemalloc.start()
    try:
        req = parse_search_request(json.loads(raw), limits)
        queries = np.zeros((len(req.queries), index.dimension), dtype=np.float32)
        index.search(queries, 5, list(req.filters))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_exclusions_take_memory_in_proportion_to_the_body():
    """A shared `exclude_ids` list with a one-id list per query was copied into every query's
    filter (~500 MB for this 0.5 MB body); now memory is bounded by the body's size."""
    index = random_index(2000)
    ids = [row.id for row in index.rows]
    n = 256
    shared = [f"{i:x}" for i in range(60000)]
    bodies = {
        "shared and per query": {"exclude_ids": shared,
                                 "exclude_ids_per_query": [[ids[i]] for i in range(n)]},
        "per query only": {"exclude_ids_per_query": [[f"{q}-{i:x}" for i in range(200)]
                                                     for q in range(n)]},
    }
    for name, extra in bodies.items():
        raw = json.dumps({"queries": ["q"] * n, "k": 5, **extra}).encode()
        assert _peak_bytes(index, raw) <= MEMORY_PER_BODY_BYTE * len(raw), name
