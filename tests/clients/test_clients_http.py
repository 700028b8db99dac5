"""The HTTP clients against local servers: SGLang wire format, aborts, timeouts, retry rules."""

from __future__ import annotations

import asyncio

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
    parse_sglang_response,
)
from evolving_rl.clients.retrieval import RetrievalClient, SearchQuery
from evolving_rl.config.schema import ClientConfig
from tests.fakes.scripted import token_log_prob
from tests.fakes.sglang_server import FakeSGLang

CFG = ClientConfig(policy_timeout_s=5, env_timeout_s=2, retrieval_timeout_s=2, max_retries=2,
                   retry_backoff_s=0.01, pool_size=4)
SAMPLING = SamplingParams(1.0, 1.0, -1, 256, ("</action>",))


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
    task = asyncio.ensure_future(client.generate([1, 2, 3], SAMPLING))
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
    ok = parse_sglang_response({"meta_info": {"output_token_logprobs": [[-0.5, 7, None]],
                                              "finish_reason": "length"}})
    assert ok.token_ids == (7,) and ok.finish_reason is FinishReason.LENGTH


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
