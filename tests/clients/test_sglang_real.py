"""`SGLangPolicyClient` against a real SGLang server and the stock sglang-router (GPU).

What the fake SGLang of the CPU tests (tests/fakes/sglang_server.py) assumes, checked on the real
thing: ids and log-probs as `/generate` returns them, the finish reasons, stop strings kept in the
ids, `score`'s prefill log-probs against the sampled ones, and the abort path through the router
(`GET /workers`, then `/abort_request` on each worker). Skipped unless `sglang` and
`sglang_router` import, CUDA is present and `EVOLVING_RL_SGLANG_MODEL` names an HF folder (e.g.
models/qwen2.5-coder-0.5b-instruct). Run on a GPU machine:

    EVOLVING_RL_SGLANG_MODEL=models/qwen2.5-coder-0.5b-instruct python -m pytest -m gpu \\
        tests/clients/test_sglang_real.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from env.launch import free_port
from evolving_rl.clients.policy import FinishReason, SamplingParams, SGLangPolicyClient
from evolving_rl.config.schema import ClientConfig

MODEL = os.environ.get("EVOLVING_RL_SGLANG_MODEL", "")
pytestmark = [
    pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(900),
    pytest.mark.skipif(not (MODEL and Path(MODEL, "config.json").is_file()),
                       reason="EVOLVING_RL_SGLANG_MODEL names no HF folder"),
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None
                       or importlib.util.find_spec("sglang_router") is None,
                       reason="needs sglang and sglang_router"),
]
CFG = ClientConfig(policy_timeout_s=120, max_retries=0, pool_size=8)
START_TIMEOUT_S = 600


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _start(command: list[str], url: str, log: Path) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _healthy(url):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            pytest.fail(f"{command[2]} did not come up at {url}: {log.read_text()[-3000:]}")
        time.sleep(2)
    return process


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def urls(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(worker URL, router URL): one SGLang server and the stock router in front of it."""
    logs = tmp_path_factory.mktemp("sglang")
    worker_port, router_port = free_port(), free_port()
    worker = f"http://127.0.0.1:{worker_port}"
    router = f"http://127.0.0.1:{router_port}"
    server = _start([sys.executable, "-m", "sglang.launch_server", "--model-path", MODEL,
                     "--host", "127.0.0.1", "--port", str(worker_port),
                     "--mem-fraction-static", "0.15"], worker, logs / "sglang.log")
    try:
        routing = _start([sys.executable, "-m", "sglang_router.launch_router", "--worker-urls",
                          worker, "--host", "127.0.0.1", "--port", str(router_port)],
                         router, logs / "router.log")
        try:
            yield worker, router
        finally:
            _stop(routing)
    finally:
        _stop(server)


@pytest.fixture(scope="module")
def encode():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    return lambda text: tokenizer.encode(text, add_special_tokens=False), tokenizer.decode


def _run(coro_fn, url: str):
    async def main():
        client = SGLangPolicyClient.open(url, CFG)
        try:
            return await coro_fn(client)
        finally:
            await client.close()
    return asyncio.run(main())


def test_a_generation_has_one_log_prob_per_sampled_id_and_stops_at_the_cap(urls, encode):
    to_ids, _ = encode
    prompt = to_ids("Write a long story about a robot who cleans a kitchen.\n")
    sampling = SamplingParams(1.0, 1.0, -1, 12)
    generation = _run(lambda client: client.generate(prompt, sampling), urls[1])
    assert len(generation.token_ids) == len(generation.log_probs) == 12
    assert generation.finish_reason is FinishReason.LENGTH
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in generation.log_probs)
    again = _run(lambda client: client.generate(prompt, sampling), urls[1])
    assert again.prefix_cache.prompt_tokens == len(prompt)  # SGLang's counts reach the client
    assert 0 < again.prefix_cache.cached_tokens <= len(prompt)  # the radix cache served a prefix


def test_a_stop_string_ends_the_turn_and_stays_in_the_ids(urls, encode):
    to_ids, decode = encode
    prompt = to_ids("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,")
    sampling = SamplingParams(0.0, 1.0, -1, 64, (" 15",))
    generation = _run(lambda client: client.generate(prompt, sampling), urls[1])
    assert generation.finish_reason is FinishReason.STOP
    assert decode(list(generation.token_ids)).endswith(" 15")


def test_scored_log_probs_are_the_sampled_ones(urls, encode):
    to_ids, _ = encode
    prompt = to_ids("You are in a kitchen. Your task is to: heat some egg.\n> ")
    sampling = SamplingParams(1.0, 1.0, -1, 48)

    async def both(client):
        generation = await client.generate(prompt, sampling)
        ids = prompt + list(generation.token_ids)
        return generation, await client.score(ids, len(prompt))

    generation, scored = _run(both, urls[1])
    assert len(scored) == len(generation.log_probs) > 0
    gaps = [abs(a - b) for a, b in zip(scored, generation.log_probs, strict=True)]
    # decode and prefill run different bfloat16 kernels: close, never bit-equal
    assert statistics.median(gaps) < 0.05 and max(gaps) < 0.5, gaps


def test_the_router_lists_its_worker_and_an_abort_through_it_stops_the_request(urls, encode):
    """`_abort(rid)` through the router reaches the worker: a request that would run for 4000
    tokens (`ignore_eos`) ends early with finish reason abort."""
    worker, router = urls
    to_ids, _ = encode
    body = {"rid": "abort-probe", "input_ids": to_ids("Write an essay.\n"), "return_logprob": True,
            "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}}

    async def abort(client):
        targets = await client._abort_targets()
        async with aiohttp.ClientSession() as session:
            request = asyncio.create_task(session.post(f"{router}/generate", json=body))
            await asyncio.sleep(1.0)
            await client._abort("abort-probe")
            async with await request as response:
                return targets, await response.json()

    targets, answer = _run(abort, router)
    assert targets == [worker]
    meta = answer["meta_info"]
    assert meta["finish_reason"]["type"] == "abort", meta["finish_reason"]
    assert 0 < meta["completion_tokens"] < 4000


def test_a_plain_server_takes_the_abort_itself(urls):
    worker, _ = urls
    assert _run(lambda client: client._abort_targets(), worker) == [worker]
