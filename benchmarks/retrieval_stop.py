"""Retrieval stop benchmark: SIGTERM while maximal requests wait for the model.

    .venv/bin/python -m benchmarks.retrieval_stop [--config configs/local_cpu.yaml]
        [--requests 32] [--set KEY=VALUE]... [--tiny]

(run from the repository root, so that `env`, `tests` and `benchmarks` import).

Builds an index of synthetic tasks as `benchmarks.retrieval_fairness` does, starts the real
server with one request thread per request (and two to spare), sends `--requests` requests at
once, each the largest the server accepts (`retrieval.max_request_tokens` of new long queries),
waits until all of them are at the model (one encoding, the others waiting for their turn), then
sends SIGTERM. Reports the answers (200, 503 `stopping`, none: the connection closed unanswered),
the seconds from SIGTERM to the process's exit, and its exit code. Target (issue 51): every
request answered, exit 0 within the launchers' `stop_timeout_s` (10 s, then SIGKILL). `--tiny`
(the test suite's smoke run): 64 tasks, 4 requests of 2,048 tokens; the same code path.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from benchmarks.cli import parse_with_tiny
from benchmarks.retrieval import report
from benchmarks.retrieval_fairness import fairness_config, large_request, large_request_parser
from env.retrieval.launcher import start_retrieval_server
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.encoder import load_encoder

TINY = {"n_tasks": 64, "requests": 4, "large_tokens": 2048}
WAIT_S = 600.0


def _answer(url: str, queries: list[str]) -> str:
    """What one request got: its status and error code, or "none" when the server closed it."""
    try:
        response = requests.post(f"{url}/search", json={"queries": queries, "k": 4},
                                 timeout=WAIT_S)
    except requests.ConnectionError:
        return "none"
    return "200" if response.ok else f"{response.status_code} {response.json()['error']}"


def _wait_for_queue(url: str, waiting: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while requests.get(f"{url}/health", timeout=30).json()["encoder_waiting"] < waiting:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{waiting} requests did not reach the model")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = large_request_parser(__doc__)
    parser.add_argument("--requests", type=int, default=32, help="maximal requests at SIGTERM")
    args = parse_with_tiny(parser, argv, TINY)
    with tempfile.TemporaryDirectory(prefix="retrieval-stop-") as tmp:
        cfg = fairness_config(args.config, Path(tmp), args.n_tasks,
                              [*args.overrides, f"retrieval.threads={args.requests + 2}"])
        ret = cfg.retrieval
        encoder = load_encoder(ret)
        refresh_cache(cfg, encoder, show_progress=False)
        tokens = args.large_tokens or ret.max_request_tokens
        bodies = [large_request(encoder, ret.max_query_chars, ret.max_batch_queries, tokens, seed)
                  for seed in range(args.requests)]
        server = start_retrieval_server(cfg)
        try:
            with ThreadPoolExecutor(args.requests) as pool:
                answers = [pool.submit(_answer, server.url, body) for body in bodies]
                _wait_for_queue(server.url, args.requests - 1)
                start = time.monotonic()
                server.proc.send_signal(signal.SIGTERM)
                code = server.proc.wait(WAIT_S)
                exit_s = time.monotonic() - start
                got = Counter(answer.result() for answer in answers)
        finally:
            if server.proc.poll() is None:
                server.stop()
    print(f"retrieval stop: {ret.model} on {ret.device}, {ret.torch_threads} torch threads, "
          f"batch_tokens {ret.batch_tokens}, {args.requests} requests of {tokens} tokens")
    answered = args.requests - got["none"]
    report("answers at SIGTERM", ", ".join(f"{k}: {n}" for k, n in sorted(got.items())),
           answered == args.requests)
    report("SIGTERM to exit", f"{exit_s:.1f} s, exit code {code}",
           code == 0 and exit_s <= ret.stop_timeout_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
