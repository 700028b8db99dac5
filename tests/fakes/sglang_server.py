"""A fake SGLang HTTP server: `/generate` with `input_ids` -> ids, log-probs, finish reason.

Answers in SGLang's native format (`meta_info.output_token_logprobs` = [logprob, id, text] per
token, `meta_info.finish_reason` = {"type": ...}); the reply text comes from a responder applied to
the decoded prompt (the scripted policy by default). Records every request body, supports
`/abort_request {"rid"}` (which ends a held request with finish reason "abort"), and can hold
requests (`hold = True`) to test cancellation. Runs on the caller's event loop.

Like slime's patched SGLang (slime docker/patch/latest/sglang-top_p.patch), a request with top_p
< 1 and `sampling_params.custom_params.return_top_p_token_ids` gets the nucleus of every sampled
id in `meta_info.top_p_token_ids` / `top_p_token_offsets`: int32 arrays, as JSON lists or
(`nucleus_base64 = True`) base64 of native int32 bytes, the patch's own encoding. The span of a
sampled id is `top_p_span(id)`, so tests can check alignment against it.

Scoring, as SGLang v0.5.15.post1 answers it (src/evolving_rl/clients/policy.py cites the lines):
with `return_logprob`, `meta_info.input_token_logprobs` has one [logprob, id, null] entry per
input position from `logprob_start_len` on (default -1: none), the first entry's logprob null and
position p's `scorer(ids, p)` (default `prefix_log_prob`, which depends on the ids before p, so a
different context scores the same ids differently); a `logprob_start_len` beyond the input is a
400 with SGLang's error body; `max_new_tokens: 0` samples nothing (finish reason length 0).

Every answer carries `prompt_tokens` and `cached_tokens` (SGLang's tokenizer_manager.py:1892,
:1919); `cached_tokens` is a radix cache's hit: the longest prefix the prompt shares with an
earlier request's prompt plus reply. `answers` records each answer's `meta_info`.
"""

from __future__ import annotations

import asyncio
import base64
import os
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from evolving_rl.clients.policy import SamplingParams
from tests.fakes.scripted import Responder, reply_text, sample_reply, token_log_prob
from tests.fakes.tokenizer import ByteChatTokenizer

VOCAB = 258  # ByteChatTokenizer: 256 bytes and two specials


def top_p_span(token_id: int) -> tuple[int, ...]:
    """The nucleus the fake reports for a sampled id: the id and 0-2 of its neighbours."""
    return (token_id, *((token_id + k) % VOCAB for k in range(1, token_id % 3 + 1)))


Scorer = Callable[[Sequence[int], int], float]


def prefix_log_prob(ids: Sequence[int], position: int) -> float:
    """The log-prob the fake scores for `ids[position]` after `ids[:position]`: the sampled
    id's `token_log_prob`, lowered by 0.01 x (sum of the ids before it mod 7)."""
    return token_log_prob(ids[position]) - (sum(ids[:position]) % 7) / 100.0


def input_token_logprobs(ids: list[int], start: int, scorer: Scorer) -> list[list[Any]]:
    """SGLang's `meta_info.input_token_logprobs` from position `start` (null first logprob)."""
    return [[None if p == start else scorer(ids, p), ids[p], None]
            for p in range(start, len(ids))]


def _int32_field(values: list[int], as_base64: bool) -> list[int] | str:
    return base64.b64encode(array("i", values).tobytes()).decode("ascii") if as_base64 else values


def nucleus_meta(ids: list[int], as_base64: bool) -> dict[str, list[int] | str]:
    """The patched server's `meta_info` nucleus fields for sampled `ids`."""
    token_ids, offsets = [], [0]
    for token in ids:
        token_ids.extend(top_p_span(token))
        offsets.append(len(token_ids))
    return {"top_p_token_ids": _int32_field(token_ids, as_base64),
            "top_p_token_offsets": _int32_field(offsets, as_base64)}


@dataclass
class FakeSGLang:
    """State and handlers of one fake server."""

    responder: Responder = reply_text
    scorer: Scorer = prefix_log_prob
    tokenizer: ByteChatTokenizer = field(default_factory=ByteChatTokenizer)
    hold: bool = False
    nucleus_base64: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    _cached: list[list[int]] = field(default_factory=list)
    _held: dict[str, asyncio.Event] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    url: str = ""

    async def _generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        params, prompt = body["sampling_params"], body["input_ids"]
        if self.hold:
            event = self._held.setdefault(body["rid"], asyncio.Event())
            await event.wait()
            return web.json_response({"text": "", "meta_info": {
                "id": body["rid"], "output_token_logprobs": [],
                "finish_reason": {"type": "abort", "message": "aborted"}}})
        start = body.get("logprob_start_len", -1)
        start = len(prompt) if start == -1 else start
        if start > len(prompt):
            return web.json_response({"error": {"message": (
                f"req.logprob_start_len={start} is higher than the number of input tokens "
                f"len(req.origin_input_ids)={len(prompt)}. Please use a smaller "
                "logprob_start_len.")}}, status=400)
        if params["max_new_tokens"] == 0:
            ids, reason = [], {"type": "length", "length": 0}
        else:
            ids, reason = self._sample(prompt, params)
        meta = {"id": body["rid"], "prompt_tokens": len(prompt),
                "cached_tokens": self._cache_hit(prompt, ids),
                "completion_tokens": len(ids), "finish_reason": reason,
                "output_token_logprobs": [[token_log_prob(i), i, None] for i in ids]}
        self.answers.append(meta)
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = input_token_logprobs(prompt, start, self.scorer)
        asked = (params.get("custom_params") or {}).get("return_top_p_token_ids", False)
        if asked and params.get("top_p", 1.0) < 1.0 and ids:
            meta.update(nucleus_meta(ids, self.nucleus_base64))
        return web.json_response({"text": self.tokenizer.decode(ids), "meta_info": meta})

    def _cache_hit(self, prompt: list[int], ids: list[int]) -> int:
        """The longest prefix of `prompt` an earlier request left in the cache; then cache this
        request's prompt and reply."""
        hit = max((len(os.path.commonprefix([prompt, seen])) for seen in self._cached),
                  default=0)
        self._cached.append(prompt + ids)
        return hit

    def _sample(self, prompt: list[int], params: dict[str, Any],
                ) -> tuple[list[int], dict[str, Any]]:
        """The responder's reply to the decoded prompt: (ids, SGLang's finish reason)."""
        sampling = SamplingParams(params["temperature"], params["top_p"], params["top_k"],
                                  params["max_new_tokens"], tuple(params.get("stop", ())))
        text = self.responder(self.tokenizer.decode(prompt))
        ids, finish = sample_reply(text, sampling, self.tokenizer)
        reason: dict[str, Any] = {"type": finish.value}
        if finish.value == "length":
            reason["length"] = len(ids)
        return ids, reason

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
