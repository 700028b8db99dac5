"""Constants and helpers shared by the retrieval tests (imported by module name: pytest puts
this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from env.launch import free_port

N_TASKS = 300
MAX_K = 20
MAX_QUERIES = 8
MAX_BODY = 4096
MAX_QUERY_CHARS = 1000
MAX_REQUEST_TOKENS = 600


def write_config(folder: Path, prepared_dir: Path, **retrieval) -> Path:
    """A YAML config whose retrieval section points into `folder`."""
    section = {"model": "minilm", "prepared_dir": str(prepared_dir),
               "cache_path": str(folder / "cache.npz"), "log_dir": str(folder / "logs"),
               "max_k": MAX_K, "max_batch_queries": MAX_QUERIES, "max_body_bytes": MAX_BODY,
               "max_query_chars": MAX_QUERY_CHARS, "max_request_tokens": MAX_REQUEST_TOKENS,
               "threads": 4, "port": free_port(), **retrieval}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"environment": "alfworld", "retrieval": section}))
    return path


def assert_valid_top_k(picked: list[int], vectors: np.ndarray, query: np.ndarray,
                       mask: np.ndarray, k: int, order: str = "most_similar",
                       tol: float = 1e-5) -> None:
    """`picked` (positions, in order) is a correct top-k of `query` among the `mask`ed rows.

    Checked against an independent float64 product with a tolerance, never bit for bit (two BLAS
    kernels differ in the last bits): the right count, only admitted rows, no duplicates; scores
    ordered within `tol`; no left-out row better than a picked one by more than `tol`. Exact ties
    (identical vectors) must break by position: a left-out duplicate of a picked row comes after
    it, and duplicates among the picked rows appear in position order.
    """
    sign = 1.0 if order == "most_similar" else -1.0
    keys = sign * (vectors.astype(np.float64) @ query.astype(np.float64))
    allowed = set(np.flatnonzero(mask).tolist())
    assert len(picked) == min(k, len(allowed)) == len(set(picked))
    assert set(picked) <= allowed
    picked_keys = keys[picked]
    assert np.all(np.diff(picked_keys) <= tol), "hits out of order"
    left_out = np.array(sorted(allowed - set(picked)), dtype=np.int64)
    if left_out.size and picked:
        assert keys[left_out].max() <= picked_keys.min() + tol, "a better row was left out"
    for rank, position in enumerate(picked):
        same = np.flatnonzero(np.all(vectors == vectors[position], axis=1))
        for other in same:
            if other in allowed and other not in picked:
                assert other > position, f"duplicate {other} left out before {position}"
        earlier = [p for p in picked[:rank] if p in set(same.tolist())]
        assert all(p < position for p in earlier), "duplicates not in position order"
