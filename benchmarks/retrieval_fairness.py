"""Retrieval fairness benchmark: a one-query client's latency while two maximal clients run.

    .venv/bin/python -m benchmarks.retrieval_fairness [--config configs/local_cpu.yaml]
        [--small 40] [--set KEY=VALUE]... [--tiny]

(run from the repository root, so that `env`, `tests` and `benchmarks` import).

Builds an index of synthetic tasks with the configured model (all-MiniLM-L6-v2 on CPU by
default) in a temporary folder, starts the real server as a subprocess and measures a client
that sends one new query at a time (so each is encoded online): first alone on the idle server
(the baseline), then beside two clients that each send, back to back, the largest request the
server accepts (`retrieval.max_request_tokens` of new long queries, at most
`retrieval.max_batch_queries` of them). Both runs in the same command, on the same server.
Prints the one-query client's p50/p99 in both runs and their ratio. Target (issue 51): p99 at
most 1 s beside the two large clients. `--set retrieval.batch_tokens=N` shows what the batch
bound buys. `--tiny` (the test suite's smoke run): 64 tasks, 3 one-query requests per run, large
requests of 2,048 tokens; the same code path.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import requests

from benchmarks.cli import parse_with_tiny
from benchmarks.retrieval import bench_config, report
from env.retrieval.launcher import start_retrieval_server
from evolving_rl.config import Config, parse_config, to_dict
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.encoder import Encoder, load_encoder
from tests.fakes.synthetic_tasks import unseen_queries

TINY = {"n_tasks": 64, "small": 3, "large_tokens": 2048}
WORDS = ("apple mug sink cabinet drawer knife lamp desk shelf towel counter fridge pan pot "
         "spoon bowl plate cup bread egg tomato lettuce potato book pencil pillow remote").split()


def fairness_config(base: str, folder: Path, n_tasks: int, overrides: list[str]) -> Config:
    """The retrieval benchmark's config, with the schema's request limits and `overrides`."""
    data = to_dict(bench_config(base, folder, n_tasks))
    data["retrieval"].update(max_batch_queries=256, max_body_bytes=1 << 20)
    return parse_config(data, "benchmark", overrides)


def large_request(encoder: Encoder, max_chars: int, max_queries: int, tokens: int,
                  seed: int) -> list[str]:
    """New long queries (`seed`) holding at most `tokens` tokens as the model reads them."""
    rng = random.Random(seed)
    queries: list[str] = []
    total = 0
    while len(queries) < max_queries:
        text = " ".join(rng.choice(WORDS) for _ in range(max_chars // 7))[:max_chars]
        (count,) = encoder.token_counts([text], encoder.query_prompt)
        if total + count > tokens:
            break
        queries.append(f"{seed} {text}"[:max_chars])
        total += count
    return queries


def one_query_latencies(url: str, queries: list[str]) -> list[float]:
    session = requests.Session()
    latencies = []
    for query in queries:
        start = time.perf_counter()
        session.post(f"{url}/search", json={"query": query, "k": 4}, timeout=300
                     ).raise_for_status()
        latencies.append(time.perf_counter() - start)
    return latencies


def large_client(url: str, requests_of: Callable[[int], list[str]], stop: threading.Event,
                 answered: list[int]) -> None:
    """Send large requests back to back until `stop`; count the answered ones."""
    session = requests.Session()
    seed = 0
    while not stop.is_set():
        seed += 1
        try:
            response = session.post(f"{url}/search", json={"queries": requests_of(seed), "k": 4},
                                    timeout=600)
        except requests.RequestException:
            return  # the server stopped under it
        answered.append(response.status_code)


def wait_for_large_clients(url: str, answered: list[int], timeout_s: float = 600) -> None:
    """Until both large requests are at the model (one encodes, one waits for its turn)."""
    deadline = time.monotonic() + timeout_s
    while requests.get(f"{url}/health", timeout=30).json()["encoder_waiting"] < 1:
        if time.monotonic() > deadline or any(status != 200 for status in answered):
            raise RuntimeError(f"the large clients did not reach the model: {answered}")
        time.sleep(0.05)


def large_request_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark of large requests: config, index size, request tokens."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--n-tasks", type=int, default=500)
    parser.add_argument("--large-tokens", type=int, default=0,
                        help="tokens of each large request (0: retrieval.max_request_tokens)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = large_request_parser(__doc__)
    parser.add_argument("--small", type=int, default=40, help="one-query requests per run")
    args = parse_with_tiny(parser, argv, TINY)
    with tempfile.TemporaryDirectory(prefix="retrieval-fairness-") as tmp:
        cfg = fairness_config(args.config, Path(tmp), args.n_tasks, args.overrides)
        ret = cfg.retrieval
        encoder = load_encoder(ret)
        refresh_cache(cfg, encoder, show_progress=False)
        tokens = args.large_tokens or ret.max_request_tokens
        queries = unseen_queries(2 * args.small + 5, seed=11)
        server = start_retrieval_server(cfg)
        stop, answered = threading.Event(), []
        try:
            one_query_latencies(server.url, queries[:5])  # warm-up
            alone = one_query_latencies(server.url, queries[5:5 + args.small])
            clients = [threading.Thread(target=large_client, daemon=True, args=(
                server.url, lambda seed, c=c: large_request(
                    encoder, ret.max_query_chars, ret.max_batch_queries, tokens, 1000 * c + seed),
                stop, answered)) for c in (1, 2)]
            for client in clients:
                client.start()
            wait_for_large_clients(server.url, answered)
            beside = one_query_latencies(server.url, queries[5 + args.small:])
            stop.set()
        finally:
            server.stop()
    alone_ms, beside_ms = np.array(alone) * 1000, np.array(beside) * 1000
    p99_alone, p99_beside = np.percentile(alone_ms, 99), np.percentile(beside_ms, 99)
    print(f"retrieval fairness: {ret.model} on {ret.device}, {ret.torch_threads} torch threads, "
          f"batch_tokens {ret.batch_tokens}, max_request_tokens {ret.max_request_tokens}, "
          f"large requests of {tokens} tokens")
    report("one-query client alone", f"p50 {np.percentile(alone_ms, 50):.0f} ms, p99 "
           f"{p99_alone:.0f} ms (n={len(alone)})", True)
    report("one-query client beside 2 large clients", f"p50 {np.percentile(beside_ms, 50):.0f} "
           f"ms, p99 {p99_beside:.0f} ms (n={len(beside)})", p99_beside <= 1000)
    report("p99 beside / alone", f"{p99_beside / p99_alone:.2f}x; large requests answered "
           f"during the run: {len(answered)}", True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
