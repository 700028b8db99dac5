"""A fake SGLang HTTP server: `/generate` with `input_ids` -> ids, log-probs, finish reason.

Answers in SGLang's native format (`meta_info.output_token_logprobs` = [logprob, id, text] per
token, `meta_info.finish_reason` = {"type": ...}); the reply text comes from a responder applied to
the decoded prompt (the scripted policy by default). Records every request body, supports
`/abort_request {"rid"}` (which ends a held request with finish reason "abort"), and can hold
requests (`hold = True`) to test cancellation. Runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from evolving_rl.clients.policy import SamplingParams
from tests.fakes.scripted import Responder, reply_text, sample_reply, token_log_prob
from tests.fakes.tokenizer import ByteChatTokenizer


@dataclass
class FakeSGLang:
    """State and handlers of one fake server."""

    responder: Responder = reply_text
    tokenizer: ByteChatTokenizer = field(default_factory=ByteChatTokenizer)
    hold: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    _held: dict[str, asyncio.Event] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    url: str = ""

    async def _generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        params = body["sampling_params"]
        sampling = SamplingParams(params["temperature"], params["top_p"], params["top_k"],
                                  params["max_new_tokens"], tuple(params.get("stop", ())))
        if self.hold:
            event = self._held.setdefault(body["rid"], asyncio.Event())
            await event.wait()
            return web.json_response({"text": "", "meta_info": {
                "id": body["rid"], "output_token_logprobs": [],
                "finish_reason": {"type": "abort", "message": "aborted"}}})
        text = self.responder(self.tokenizer.decode(body["input_ids"]))
        ids, finish = sample_reply(text, sampling, self.tokenizer)
        reason: dict[str, Any] = {"type": finish.value}
        if finish.value == "length":
            reason["length"] = len(ids)
        return web.json_response({"text": self.tokenizer.decode(ids), "meta_info": {
            "id": body["rid"], "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids), "finish_reason": reason,
            "output_token_logprobs": [[token_log_prob(i), i, None] for i in ids]}})

    async def _abort(self, request: web.Request) -> web.Response:
        rid = (await request.json())["rid"]
        self.aborted.append(rid)
        self._held.setdefault(rid, asyncio.Event()).set()
        return web.Response(status=200)

    async def start(self, port: int) -> str:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        for event in self._held.values():
            event.set()
        if self._runner is not None:
            await self._runner.cleanup()
