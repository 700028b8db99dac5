"""The retrieval cache from Mind2Web's prepared rows, as scripts/web/build_cache.sh builds it.

A generated dataset in the official layout (test zip included) goes through
`env.mind2web.prepare`; the cache is then built from the config's `mind2web.prepared_dir` (no
`retrieval.prepared_dir`: the environment's own section names it). Every task is embedded once
whatever the number of split files it sits in (`all` repeats them), keeps the splits it was
prepared in, and training retrieval (split `train`) never returns a test task.
"""

from __future__ import annotations

import json

import yaml

from env.mind2web.generate import GenerateSpec, generate
from env.mind2web.prepare import SPLITS, prepare
from evolving_rl.config import load_config
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.cache import load_cache
from evolving_rl.retrieval.index import SearchFilter, SearchIndex

PASSWORD = "web-rows"


def _split_ids(prepared_dir) -> dict[str, set[str]]:
    return {split: {json.loads(line)["id"] for line in
                    (prepared_dir / f"{split}.jsonl").read_text().splitlines()}
            for split in (*SPLITS, "all")}


def test_web_rows_build_a_cache_that_keeps_their_splits(tmp_path, encoder):
    data = generate(tmp_path / "root", GenerateSpec(tasks=20, seed=5, password=PASSWORD))
    prepared = tmp_path / "prepared"
    prepare(data.root, prepared, password=PASSWORD)
    path = tmp_path / "web.yaml"
    path.write_text(yaml.safe_dump({
        "environment": "mind2web",
        "mind2web": {"data_root": str(data.root), "prepared_dir": str(prepared)},
        "retrieval": {"model": "minilm", "cache_path": str(tmp_path / "cache.npz")}}))
    cfg = load_config(path)
    stats = refresh_cache(cfg, encoder, show_progress=False)

    ids = _split_ids(prepared)
    cache = load_cache(cfg.retrieval.cache_path)
    assert {row.id for row in cache.rows} == ids["all"] and len(cache.rows) == 20
    assert (stats.n_rows, stats.n_encoded) == (20, 20)
    for row in cache.rows:
        assert set(row.splits) == {"all"} | {s for s in SPLITS if row.id in ids[s]}, row.id

    index = SearchIndex(cache)
    train_row = next(row for row in cache.rows if "train" in row.splits)
    query = encoder.encode_queries([train_row.question])
    for split in SPLITS:
        flt = SearchFilter(split=split, exclude_ids=frozenset({train_row.id}))
        [hits] = index.search(query, 20, [flt])
        assert {hit.id for hit in hits} == ids[split] - {train_row.id}, split
