"""Retrieval benchmark: latency, batching gain, exactness and cache-build speed on the CPU model.

    .venv/bin/python -m benchmarks.retrieval [--config configs/local_cpu.yaml] [--n-tasks 4000]
        [--tiny]

(run from the repository root, so that `env`, `tests` and `benchmarks` import).

Builds an index of synthetic ALFWorld-like tasks with the configured model (all-MiniLM-L6-v2 on
CPU by default) in a temporary folder, starts the real server as a subprocess and measures:
- single-query latency p50/p99 over HTTP, each query a new sentence (so encoded online);
- batched (64 queries per request) vs single-query throughput (ratio; target >= 5x);
- top-k of the server and of the in-process index vs a brute-force full stable sort of the
  index's own scores (`SearchIndex.scores`; must be identical);
- cache-build texts/s vs a bare `SentenceTransformer.encode` of the same texts (target >= 0.9x).
Baseline and candidate run in the same process, interleaved round by round.
Targets (issue 3): p50 < 30 ms, batched >= 5x single, builder >= 0.9x bare, top-k identical.
The exit status is 1 only when a top-k differs. `--tiny` (the test suite's smoke run): 64 tasks,
one round of each measurement with 8 single and 1 batched request per HTTP round, 16 indexed and
16 new sentences checked for exactness; the same code path.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

from benchmarks.cli import parse_with_tiny
from env.launch import free_port
from env.retrieval.launcher import start_retrieval_server
from evolving_rl.config import Config, load_config, parse_config, to_dict
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.cache import load_cache
from evolving_rl.retrieval.encoder import Encoder, load_encoder
from evolving_rl.retrieval.index import (
    SearchFilter,
    SearchIndex,
    brute_force_positions,
)
from evolving_rl.retrieval.prepared import prepared_dir_for
from evolving_rl.retrieval.tasks import load_task_rows
from tests.fakes.synthetic_tasks import unseen_queries, write_prepared_splits

BATCH = 64
TINY = {"n_tasks": 64, "build_rounds": 1, "http_rounds": 1, "singles": 8, "batches": 1,
        "indexed_checks": 16, "fresh_checks": 16}
FILTERS = (SearchFilter(), SearchFilter(split="train"),
           SearchFilter(split="valid_unseen", task_types=("pick_two_obj_and_place",)))


def bench_config(base: str, folder: Path, n_tasks: int) -> Config:
    """The base config retargeted at `folder`, where the benchmark's task splits are written."""
    data = to_dict(load_config(base))
    data["retrieval"].update(prepared_dir=str(folder / "prepared"),
                             cache_path=str(folder / "cache.npz"), log_dir=str(folder / "logs"),
                             port=free_port(), max_batch_queries=max(BATCH, 64),
                             start_timeout_s=180)
    write_prepared_splits(folder / "prepared", n_tasks)
    return parse_config(data)


def bench_build(cfg: Config, encoder: Encoder, rounds: int) -> tuple[float, float, int]:
    """Best-of-rounds texts/s of the cache builder (from scratch: read splits, hash, encode,
    save) and of bare encode of the same texts, interleaved with alternating order. Best-of
    (like timeit) because other processes on the machine only ever add time."""
    texts = [row.question for row in load_task_rows(prepared_dir_for(cfg))]
    encoder.model.encode(texts[:BATCH], show_progress_bar=False)  # warm-up
    bare, built = [], []
    for r in range(rounds):
        for kind in (("bare", "builder") if r % 2 == 0 else ("builder", "bare")):
            if kind == "bare":
                start = time.perf_counter()
                encoder.model.encode(texts, batch_size=cfg.retrieval.batch_size,
                                     convert_to_numpy=True, normalize_embeddings=True,
                                     show_progress_bar=False)
                bare.append(len(texts) / (time.perf_counter() - start))
            else:
                Path(cfg.retrieval.cache_path).unlink(missing_ok=True)
                start = time.perf_counter()
                refresh_cache(cfg, encoder, show_progress=False)
                built.append(len(texts) / (time.perf_counter() - start))
    return max(built), max(bare), len(texts)


def bench_http(url: str, queries: list[str], rounds: int, singles: int,
               batches: int) -> tuple[list[float], float, float]:
    """Latencies of single queries and throughputs (q/s) of single vs batched, interleaved."""
    session = requests.Session()
    pending = iter(queries)

    def search(texts: list[str]) -> None:
        response = session.post(f"{url}/search", json={"queries": texts, "k": 4}, timeout=60)
        response.raise_for_status()

    for _ in range(5):
        search([next(pending)])
    latencies, batch_time, n_batched = [], 0.0, 0
    for _ in range(rounds):
        for _ in range(singles):
            start = time.perf_counter()
            search([next(pending)])
            latencies.append(time.perf_counter() - start)
        for _ in range(batches):
            texts = [next(pending) for _ in range(BATCH)]
            start = time.perf_counter()
            search(texts)
            batch_time += time.perf_counter() - start
            n_batched += BATCH
    return latencies, len(latencies) / sum(latencies), n_batched / batch_time


def check_exactness(url: str, index: SearchIndex, encoder: Encoder, k: int, n_indexed: int,
                    n_fresh: int) -> tuple[int, int]:
    """Compare top-k with brute force: server (`n_indexed` indexed texts, so known vectors) and
    in-process index (`n_fresh` online-encoded new sentences). Returns (identical, checked)."""
    same = checked = 0
    picks = np.random.default_rng(0).choice(index.size, n_indexed, replace=False)
    fresh = unseen_queries(n_fresh, seed=99)
    fresh_vectors = encoder.encode_queries(fresh)
    for flt in FILTERS:
        body = {"queries": [index.rows[i].question for i in picks], "k": k, "split": flt.split,
                "task_types": list(flt.task_types) if flt.task_types else None}
        results = requests.post(f"{url}/search", json=body, timeout=60).json()["results"]
        mask = index.allowed(flt)
        for i, hits in zip(picks, results, strict=True):
            expected = brute_force_positions(index.scores(index.vectors[i][None])[0], mask, k)
            same += [h["id"] for h in hits] == [index.rows[j].id for j in expected]
            checked += 1
        for order in ("most_similar", "least_similar"):
            found = index.search(fresh_vectors, k, [flt] * len(fresh), order)
            for vector, hits in zip(fresh_vectors, found, strict=True):
                expected = brute_force_positions(index.scores(vector[None])[0], mask, k,
                                                 order)
                same += [h.id for h in hits] == [index.rows[j].id for j in expected]
                checked += 1
    return same, checked


def report(name: str, value: str, ok: bool) -> None:
    print(f"{name:<48} {value:<50} {'PASS' if ok else 'MISS'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--n-tasks", type=int, default=4000)
    parser.add_argument("--build-rounds", type=int, default=4)
    parser.add_argument("--http-rounds", type=int, default=4)
    parser.add_argument("--singles", type=int, default=50, help="single queries per HTTP round")
    parser.add_argument("--batches", type=int, default=3, help="batched requests per HTTP round")
    parser.add_argument("--indexed-checks", type=int, default=48,
                        help="indexed texts checked against brute force, per filter")
    parser.add_argument("--fresh-checks", type=int, default=200,
                        help="new sentences checked against brute force, per filter and order")
    args = parse_with_tiny(parser, argv, TINY)
    with tempfile.TemporaryDirectory(prefix="retrieval-bench-") as tmp:
        cfg = bench_config(args.config, Path(tmp), args.n_tasks)
        encoder = load_encoder(cfg.retrieval)
        build_tps, bare_tps, n_texts = bench_build(cfg, encoder, args.build_rounds)
        index = SearchIndex(load_cache(cfg.retrieval.cache_path))
        server = start_retrieval_server(cfg)
        try:
            queries = unseen_queries(5 + args.http_rounds * (args.singles + args.batches * BATCH),
                                     seed=7)
            latencies, single_qps, batch_qps = bench_http(server.url, queries, args.http_rounds,
                                                          args.singles, args.batches)
            same, checked = check_exactness(server.url, index, encoder, 10,
                                            args.indexed_checks, args.fresh_checks)
        finally:
            server.stop()
    ms = np.array(latencies) * 1000
    p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
    print(f"retrieval benchmark: {index.size} tasks, {index.model} ({index.dimension}-d) on "
          f"{cfg.retrieval.device}, {cfg.retrieval.torch_threads} torch threads, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    report("single query over HTTP (incl. encoding)", f"p50 {p50:.1f} ms, p99 {p99:.1f} ms "
           f"(n={len(ms)})", p50 < 30)
    report(f"batched ({BATCH}) vs single throughput", f"{batch_qps:.0f} vs {single_qps:.0f} q/s "
           f"= {batch_qps / single_qps:.2f}x", batch_qps >= 5 * single_qps)
    report("cache build vs bare SentenceTransformer.encode", f"{build_tps:.0f} vs "
           f"{bare_tps:.0f} texts/s = {build_tps / bare_tps:.3f}x ({n_texts} texts)",
           build_tps >= 0.9 * bare_tps)
    report("top-k identical to brute force", f"{same}/{checked} queries", same == checked)
    print(f"config: {dataclasses.asdict(cfg.retrieval)}")
    return 0 if same == checked else 1


if __name__ == "__main__":
    sys.exit(main())
