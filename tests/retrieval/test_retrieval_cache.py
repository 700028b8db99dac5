"""Cache builder: incremental rebuild by text hash, model keying, atomic save, load errors."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from evolving_rl.config import load_config
from evolving_rl.retrieval import build
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.cache import CacheError, build_cache, load_cache, save_cache
from tests.fakes.synthetic_tasks import write_prepared_splits


class CountingEncoder:
    """Wraps the real encoder and records every text it is asked to encode."""

    def __init__(self, encoder, name=None):
        self.inner = encoder
        self.name = name or encoder.name
        self.dimension = encoder.dimension
        self.encoded: list[str] = []

    def encode_documents(self, texts, show_progress=False):
        self.encoded.extend(texts)
        return self.inner.encode_documents(texts)


def _rewrite_question(prepared, task_id, question):
    """Change one task's question in every split file that holds it."""
    for path in prepared.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.open()]
        for row in rows:
            if row["id"] == task_id:
                row["question"] = question
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rebuild_encodes_only_changed_texts(tmp_path, encoder, make_config):
    prepared = tmp_path / "prepared"
    write_prepared_splits(prepared, 40, seed=3)
    cfg = load_config(make_config(tmp_path, prepared))
    counting = CountingEncoder(encoder)
    first = refresh_cache(cfg, counting, show_progress=False)
    assert (first.n_encoded, len(counting.encoded)) == (40, 40)
    before = load_cache(cfg.retrieval.cache_path)
    assert before.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(before.vectors, axis=1), 1.0, atol=1e-5)

    counting.encoded.clear()
    assert refresh_cache(cfg, counting, show_progress=False).n_encoded == 0
    assert counting.encoded == []

    changed = before.rows[7]
    _rewrite_question(prepared, changed.id, "slice a tomato and put it in the fridge.")
    stats = refresh_cache(cfg, counting, show_progress=False)
    assert counting.encoded == ["slice a tomato and put it in the fridge."]
    assert (stats.n_encoded, stats.n_reused) == (1, 39)
    after = load_cache(cfg.retrieval.cache_path)
    assert after.rows[7].question != changed.question
    assert not np.allclose(after.vectors[7], before.vectors[7])
    keep = [i for i in range(40) if i != 7]
    np.testing.assert_array_equal(after.vectors[keep], before.vectors[keep])
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_cache_of_another_model_is_fully_reencoded(tmp_path, encoder, cache):
    rows = list(cache.rows[:10])
    other = CountingEncoder(encoder, name="another-model")
    rebuilt, stats = build_cache(rows, other, previous=cache, show_progress=False)
    assert stats.n_encoded == 10 and len(other.encoded) == 10
    assert rebuilt.model == "another-model"


def test_duplicate_texts_are_encoded_once(encoder, cache):
    rows = [cache.rows[0], dataclasses.replace(cache.rows[1], question=cache.rows[0].question)]
    counting = CountingEncoder(encoder)
    built, stats = build_cache(rows, counting, show_progress=False)
    assert len(counting.encoded) == 1 and stats.n_unique_texts == 1
    np.testing.assert_array_equal(built.vectors[0], built.vectors[1])


def test_save_and_load_round_trip(tmp_path, cache):
    path = tmp_path / "sub" / "c.npz"
    save_cache(cache, path)
    loaded = load_cache(path)
    assert (loaded.model, loaded.dimension, loaded.rows, loaded.hashes) == \
        (cache.model, cache.dimension, cache.rows, cache.hashes)
    np.testing.assert_array_equal(loaded.vectors, cache.vectors)


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(CacheError, match="not found"):
        load_cache(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(CacheError, match="unreadable"):
        load_cache(bad)


def test_build_cli(tmp_path, prepared_dir, make_config, caplog):
    config_path = make_config(tmp_path, prepared_dir)
    with caplog.at_level(logging.INFO):
        assert build.main(["--config", str(config_path), "--splits", "valid_seen"]) == 0
    assert len(load_cache(tmp_path / "cache.npz").rows) == 30
    assert build.main(["--config", str(config_path), "--set", "retrieval.model=/nowhere"]) == 2
    assert "embedding model folder not found" in caplog.text


def test_a_current_cache_is_known_without_the_encoder(tmp_path, encoder, make_config):
    prepared = tmp_path / "prepared"
    write_prepared_splits(prepared, 12, seed=4)
    cfg = load_config(make_config(tmp_path, prepared))
    assert not build.cache_is_current(cfg)  # no cache yet
    refresh_cache(cfg, encoder, show_progress=False)
    assert build.cache_is_current(cfg)
    _rewrite_question(prepared, load_cache(cfg.retrieval.cache_path).rows[3].id, "a new task.")
    assert not build.cache_is_current(cfg)
    refresh_cache(cfg, encoder, show_progress=False)
    other = dataclasses.replace(cfg, retrieval=dataclasses.replace(cfg.retrieval,
                                                                   model=str(tmp_path)))
    assert build.cache_is_current(cfg) and not build.cache_is_current(other)
