"""The HTTP clients against local servers: SGLang wire format, aborts, timeouts, retry rules, and
scoring (`SGLangPolicyClient.score`) against the fake SGLang, which answers as SGLang
v0.5.15.post1 does (the offsets are cited in src/evolving_rl/clients/policy.py)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine
from typing import Any

import pytest
from aiohttp import ClientSession, web

from env.launch import free_port
from evolving_rl.clients.env import EnvClient
from evolving_rl.clients.http import ServerError, TransportError
from evolving_rl.clients.policy import (
    FinishReason,
    PolicyError,
    SamplingParams,
    SGLangPolicyClient,
    parse_scored_log_probs,
    parse_sglang_response,
)
from evolving_rl.clients.retrieval import RetrievalClient, SearchQuery
from evolving_rl.config.schema import ClientConfig
from evolving_rl.core.samples import PrefixCacheCounts
from tests.fakes.scripted import token_log_prob
from tests.fakes.sglang_server import FakeSGLang, prefix_log_prob

CFG = ClientConfig(policy_timeout_s=5, env_timeout_s=2, retrieval_timeout_s=2, max_retries=2,
                   retry_backoff_s=0.01, pool_size=4)
SAMPLING = SamplingParams(1.0, 1.0, -1, 256, ("</action>",))
PROMPT, RESPONSE = list(b"You see a desk.\n"), list(b"<action>go to desk 1</action>")


async def _with_fake(fn, **fake_args):
    fake = FakeSGLang(**fake_args)
    url = await fake.start(free_port())
    client = SGLangPolicyClient.open(url, CFG)
    try:
        return await fn(fake, client)
    finally:
        await client.close()
        await fake.stop()


def test_generate_sends_ids_and_reads_ids_log_probs_and_finish_reason():
    async def run(fake, client):
        prompt = list(b"Admissible actions:\n1. go to desk 1\n")
        generation = await client.generate(prompt, SAMPLING)
        body = fake.requests[0]
        assert body["input_ids"] == prompt and body["return_logprob"] is True and body["rid"]
        assert body["sampling_params"]["max_new_tokens"] == 256
        assert body["sampling_params"]["stop"] == ["</action>"]
        assert bytes(generation.token_ids).decode().endswith("<action>go to desk 1</action>")
        assert generation.log_probs == tuple(token_log_prob(t) for t in generation.token_ids)
        assert generation.finish_reason is FinishReason.STOP
        short = await client.generate(prompt, SAMPLING.capped(5))
        assert len(short.token_ids) == 5 and short.finish_reason is FinishReason.LENGTH

    asyncio.run(_with_fake(run))


async def _cancel_a_held_generation(client: SGLangPolicyClient, worker: FakeSGLang) -> None:
    """Start a generation the worker holds, then cancel it (an episode aborted)."""
    await _cancel_held(client.generate([1, 2, 3], SAMPLING), worker)


async def _cancel_held(request: Coroutine[Any, Any, Any], worker: FakeSGLang) -> None:
    """Start `request`, which the worker holds, then cancel it."""
    task = asyncio.ensure_future(request)
    while not worker.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_cancelling_a_generation_aborts_it_on_the_server():
    async def run(fake, client):
        await _cancel_a_held_generation(client, fake)
        assert fake.aborted == [fake.requests[0]["rid"]]

    asyncio.run(_with_fake(run, hold=True))


class _StockRouter:
    """A stand-in for sglang-router 0.3.2 over one worker: forwards `/generate`, lists the worker
    at `GET /workers` and answers 404 to `/abort_request`, as the PyPI router does."""

    def __init__(self, worker_url: str) -> None:
        self.worker_url, self.hits = worker_url, []
        self._runner: web.AppRunner | None = None

    async def _generate(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        async with ClientSession() as session, session.post(
                f"{self.worker_url}/generate", json=await request.json()) as answer:
            return web.json_response(await answer.json())

    async def _workers(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.json_response({"workers": [{"id": "w0", "url": self.worker_url}], "total": 1})

    async def _not_found(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(status=404)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_get("/workers", self._workers)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        await self._runner.cleanup()


def test_an_abort_through_the_router_reaches_the_worker(caplog):
    """slime's way (slime/rollout/sglang_rollout.py:346-349): list the router's workers, post the
    abort to each; the router's own /abort_request is a 404."""
    async def run():
        worker = FakeSGLang(hold=True)
        router = _StockRouter(await worker.start(free_port()))
        client = SGLangPolicyClient.open(await router.start(), CFG)
        try:
            await _cancel_a_held_generation(client, worker)
            assert worker.aborted == [worker.requests[0]["rid"]]
            assert router.hits == ["/generate", "/workers"]
        finally:
            await client.close()
            await router.stop()
            await worker.stop()

    asyncio.run(run())
    assert "abort" not in caplog.text  # no failed abort was logged


def test_malformed_answers_are_policy_errors():
    with pytest.raises(PolicyError):
        parse_sglang_response({"text": "x"})
    with pytest.raises(PolicyError):
        parse_sglang_response({"meta_info": {"output_token_logprobs": [[0.0, 1]],
                                             "finish_reason": {"type": "weird"}}})
    with pytest.raises(PolicyError, match="cached_tokens"):
        parse_sglang_response({"meta_info": {"output_token_logprobs": [], "cached_tokens": "3",
                                             "finish_reason": "length"}})
    ok = parse_sglang_response({"meta_info": {"output_token_logprobs": [[-0.5, 7, None]],
                                              "finish_reason": "length"}})
    assert ok.token_ids == (7,) and ok.finish_reason is FinishReason.LENGTH
    assert ok.prefix_cache == PrefixCacheCounts(0, 0)  # counts absent: none


def test_an_answer_carries_sglangs_prefix_cache_counts():
    answer = parse_sglang_response({"meta_info": {
        "output_token_logprobs": [[-0.5, 7, None]], "finish_reason": {"type": "stop"},
        "prompt_tokens": 40, "cached_tokens": 32}})
    assert answer.prefix_cache == PrefixCacheCounts(prompt_tokens=40, cached_tokens=32)


def test_refused_connection_is_retried_then_reported():
    async def run():
        client = SGLangPolicyClient.open(f"http://127.0.0.1:{free_port()}", CFG)
        try:
            with pytest.raises(PolicyError, match="Connect"):
                await client.generate([1], SAMPLING)
        finally:
            await client.close()

    asyncio.run(run())


class _Counting:
    """A server whose every route answers `status` and counts hits per path."""

    def __init__(self, status: int, delay_s: float = 0.0) -> None:
        self.status, self.delay_s, self.hits = status, delay_s, {}

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        await asyncio.sleep(self.delay_s)
        return web.json_response({"error": "nope"}, status=self.status)

    async def start(self) -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner, f"http://127.0.0.1:{port}"


def test_step_is_never_retried_but_search_is():
    async def run():
        server = _Counting(500)
        runner, url = await server.start()
        env, retrieval = EnvClient.open(url, CFG), RetrievalClient.open(url, CFG)
        try:
            with pytest.raises(ServerError):
                await env.step("ep", "look")
            with pytest.raises(ServerError):
                await retrieval.search([SearchQuery("q")], 2)
        finally:
            await env.close()
            await retrieval.close()
            await runner.cleanup()
        assert server.hits == {"/step": 1, "/search": 1 + CFG.max_retries}

    asyncio.run(run())


def test_env_timeout_is_a_transport_error():
    async def run():
        server = _Counting(200, delay_s=1.0)
        runner, url = await server.start()
        env = EnvClient.open(url, ClientConfig(env_timeout_s=0.2, max_retries=2))
        try:
            with pytest.raises(TransportError):
                await env.step("ep", "look")
        finally:
            await env.close()
            await runner.cleanup()
        assert server.hits == {"/step": 1}

    asyncio.run(run())


def test_503_at_capacity_is_retried_even_for_step():
    async def run():
        server = _Counting(503)
        runner, url = await server.start()
        env = EnvClient.open(url, CFG)
        try:
            with pytest.raises(ServerError):
                await env.step("ep", "look")
        finally:
            await env.close()
            await runner.cleanup()
        assert server.hits == {"/step": 1 + CFG.max_retries}

    asyncio.run(run())


def test_score_sends_one_prefill_and_reads_the_log_probs_of_the_scored_ids():
    async def run(fake, client):
        ids = PROMPT + RESPONSE
        scored = await client.score(ids, len(PROMPT))
        body = fake.requests[0]
        assert body["input_ids"] == ids and body["return_logprob"] is True and body["rid"]
        assert body["sampling_params"] == {"max_new_tokens": 0, "temperature": 1.0}
        assert body["logprob_start_len"] == len(PROMPT) - 1
        assert scored == [prefix_log_prob(ids, p) for p in range(len(PROMPT), len(ids))]
        # the same ids after another context score differently: the context is what is scored
        other = list(b"You see a desk and a lamp.\n") + RESPONSE
        assert await client.score(other, len(other) - len(RESPONSE)) != scored
        # one id after a one-id context: the smallest request (logprob_start_len 0)
        assert await client.score(ids[:2], 1) == [prefix_log_prob(ids, 1)]

    asyncio.run(_with_fake(run))


def test_the_fake_answers_logprob_start_len_as_sglang_does():
    """One entry per position from logprob_start_len, the first logprob null; beyond the input a
    400 with SGLang's error body; without logprob_start_len no input entry."""
    async def run(fake, client):
        ids = PROMPT[:5]
        async with ClientSession() as session:
            async def post(**extra):
                body = {"rid": "r", "input_ids": ids, "return_logprob": True,
                        "sampling_params": {"max_new_tokens": 0}, **extra}
                async with session.post(f"{fake.url}/generate", json=body) as answer:
                    return answer.status, await answer.json()

            status, data = await post(logprob_start_len=0)
            entries = data["meta_info"]["input_token_logprobs"]
            assert status == 200 and [e[1] for e in entries] == ids and entries[0][0] is None
            assert [e[0] for e in entries[1:]] == [prefix_log_prob(ids, p) for p in range(1, 5)]
            assert data["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
            assert data["meta_info"]["output_token_logprobs"] == []
            status, data = await post()
            assert status == 200 and data["meta_info"]["input_token_logprobs"] == []
            status, data = await post(logprob_start_len=6)
            assert status == 400 and "logprob_start_len" in data["error"]["message"]

    asyncio.run(_with_fake(run))


def test_score_refuses_a_start_without_log_probs_and_a_temperature_sglang_ignores():
    async def run(fake, client):
        for start in (0, len(PROMPT)):
            with pytest.raises(ValueError, match="start"):
                await client.score(PROMPT, start)
        with pytest.raises(ValueError, match="unscaled logits"):
            await client.score(PROMPT, 3, temperature=0.7)
        assert fake.requests == []

    asyncio.run(_with_fake(run))


@pytest.mark.parametrize("scorer, match", [
    (lambda ids, p: math.nan, "finite"),
    (lambda ids, p: math.inf if p == 17 else -1.0, "position 1"),
])
def test_score_refuses_non_finite_log_probs_over_http(scorer, match):
    async def run(fake, client):
        with pytest.raises(PolicyError, match=match):
            await client.score(PROMPT + RESPONSE, len(PROMPT))

    asyncio.run(_with_fake(run, scorer=scorer))


@pytest.mark.parametrize("answer, match", [
    ({"text": ""}, "no meta_info.input_token_logprobs"),
    ({"meta_info": {"input_token_logprobs": [[-1.0, 5, None]]}}, "scored 1 input tokens, 2"),
    ({"meta_info": {"input_token_logprobs": [[None, 4, None], [-1.0, 5, None]]}}, "finite"),
    ({"meta_info": {"input_token_logprobs": [[-1.0, 4], ["x", 5]]}}, "finite"),
    ({"meta_info": {"input_token_logprobs": [[-1.0, 4], 5]}}, "malformed"),
])
def test_unusable_scoring_answers_are_policy_errors(answer, match):
    with pytest.raises(PolicyError, match=match):
        parse_scored_log_probs(answer, 2)


def test_the_tail_is_read_whatever_sglang_puts_before_it():
    answer = {"meta_info": {"input_token_logprobs": [[None, 1, None], [-0.5, 2, None],
                                                     [-0.25, 3, None]]}}
    assert parse_scored_log_probs(answer, 2) == [-0.5, -0.25]


def test_cancelling_a_score_aborts_its_request_on_the_server():
    async def run(fake, client):
        await _cancel_held(client.score(PROMPT + RESPONSE, len(PROMPT)), fake)
        assert fake.aborted == [fake.requests[0]["rid"]]

    asyncio.run(_with_fake(run, hold=True))
