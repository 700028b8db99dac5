"""The encoded-query cache is bounded by bytes (text + vector), not by a count of entries, and the
server refuses an index whose questions its query bound would refuse."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from evolving_rl.config import load_config
from evolving_rl.retrieval.encoder import Encoder, EncoderClosed, load_encoder
from evolving_rl.retrieval.query_cache import QueryCache, entry_bytes

DIM = 8


def vectors(n: int, dim: int = DIM) -> np.ndarray:
    return np.arange(n * dim, dtype=np.float32).reshape(n, dim)


def test_an_entry_costs_its_text_and_its_vector():
    row = vectors(1)[0]
    assert entry_bytes("abc", row) == sys.getsizeof("abc") + 4 * DIM
    assert entry_bytes("é" * 1000, row) > entry_bytes("e" * 1000, row) > 1000


def test_the_least_recently_used_are_evicted_to_fit_the_bytes():
    texts = [f"query {i}" for i in range(4)]
    cost = entry_bytes(texts[0], vectors(1)[0])
    cache = QueryCache(3 * cost)
    cache.put_many(texts[:3], vectors(3))
    assert (len(cache), cache.bytes) == (3, 3 * cost)
    assert set(cache.get_many([texts[0]])) == {texts[0]}  # now the most recently used
    cache.put_many(texts[3:], vectors(1))
    assert texts[1] not in cache and {texts[0], texts[2], texts[3]} <= set(cache.get_many(texts))
    assert cache.bytes == 3 * cost <= cache.max_bytes
    cache.put_many(texts[:1], vectors(1) + 1)  # replacing an entry does not count it twice
    assert (len(cache), cache.bytes) == (3, 3 * cost)
    np.testing.assert_array_equal(cache.get_many(texts[:1])[texts[0]], vectors(1)[0] + 1)


def test_an_entry_over_the_whole_bound_is_not_kept_and_a_zero_bound_keeps_nothing():
    big = "q" * 10_000
    cache = QueryCache(5_000)
    cache.put_many(["small", big], vectors(2))
    assert big not in cache and "small" in cache
    assert cache.bytes == entry_bytes("small", vectors(1)[0])
    empty = QueryCache(0)
    empty.put_many(["small"], vectors(1))
    assert (len(empty), empty.bytes) == (0, 0)


def test_a_kept_row_does_not_hold_its_batch():
    batch = vectors(1000)
    cache = QueryCache(10_000)
    cache.put_many(["one"], batch[:1])
    kept = cache.get_many(["one"])["one"]
    assert kept.base is None and kept.nbytes == 4 * DIM


def test_the_server_encoder_keeps_at_most_the_configured_bytes(tmp_path, prepared_dir,
                                                               make_config):
    cfg = load_config(make_config(tmp_path, prepared_dir, query_cache_bytes=4000)).retrieval
    bounded = load_encoder(cfg)
    queries = [f"put the {i}th mug in the sink" for i in range(10)]
    bounded.encode_queries(queries)
    assert 0 < len(bounded.query_cache) < len(queries)
    assert bounded.query_cache.bytes <= 4000 == bounded.query_cache.max_bytes


def test_a_closed_encoder_encodes_nothing(encoder):
    closing = Encoder(encoder.model, encoder.name, encoder.batch_size, encoder.batch_tokens)
    assert closing.encode_queries(["a fresh query"]).shape == (1, encoder.dimension)
    closing.close()
    with pytest.raises(EncoderClosed):
        closing.encode_queries(["another fresh query"])


def test_an_indexed_question_over_max_query_chars_refuses_to_start(tmp_path, prepared_dir,
                                                                    make_config, config, cache):
    longest = max(len(row.question) for row in cache.rows)
    config_path = make_config(tmp_path, prepared_dir, max_query_chars=longest - 1,
                              cache_path=config.retrieval.cache_path)
    done = subprocess.run([sys.executable, "-m", "env.retrieval", "--config", str(config_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert (f"has a question of {longest} characters, over retrieval.max_query_chars="
            f"{longest - 1}") in done.stderr
