"""The policy client: one interface for sampling tokens, and its SGLang implementation.

Owns `SamplingParams`, `Generation` and the `PolicyClient` protocol the episode loop calls,
plus `SGLangPolicyClient`, which posts token ids to SGLang's `/generate` with
`return_logprob: true` and reads the sampled ids and log-probs back from
`meta_info.output_token_logprobs` ([logprob, token id, text] per token) with the answer's
prefix-cache counts (`prompt_tokens`, `cached_tokens`: `PrefixCacheCounts`), and scores given ids
without sampling (`score`, "Scoring" below). Nothing is ever re-tokenised. Every request carries
its own `rid`; when the calling task is cancelled (an episode aborted) or times out, the client
aborts that `rid` on SGLang so it stops generating for nobody.
Through a router it aborts as slime does (slime/rollout/sglang_rollout.py:346-349, then
slime/backends/sglang_utils/server_control.py:32-34): it lists the router's workers
(`GET /workers` -> `{"workers": [{"url": ...}]}`) and posts `/abort_request` to each worker, since
the router (sglang-router 0.3.2) answers 404 to `/abort_request` itself. Unlike slime, which
aborts everything (`abort_all`) at the end of a rollout, it aborts only its own `rid`. A server
without `/workers` (a plain SGLang server, e.g. the evaluation's) gets the abort directly.
A generation is retried only when the connection was refused before the request was sent.

Top-p replay (the slime path, `SGLangPolicyClient(..., top_p_replay=True)`): a request with
top_p < 1 also sends `sampling_params.custom_params = {"return_top_p_token_ids": true}`, as slime's
own rollout does (slime/rollout/sglang_rollout.py:106-107), and the answer must carry the nucleus
of every sampled token: `meta_info.top_p_token_ids` / `top_p_token_offsets` (or the
`top_p_kept_*` names), int32 arrays as JSON lists or base64 of native int32 bytes (read as
slime/utils/types.py:9-36 and slime/utils/misc.py:13-35 read them). It lands in
`Generation.nucleus`. Without replay nothing slime-specific is sent, and a nucleus in an answer is
still read (and validated) when present.

Scoring (`score`, the teacher of docs/design.md §4.6): one prefill, as slime's own on-policy
distillation asks its teacher (slime/rollout/on_policy_distillation.py:10-20): `/generate` with
`max_new_tokens: 0`, `return_logprob: true` and `logprob_start_len` = start - 1, its own rid
(aborted like a generation's). SGLang v0.5.15.post1 (the pin's, python/sglang/srt/...):
`meta_info.input_token_logprobs` has one [logprob, id, text] entry per input position from
`logprob_start_len` on (managers/scheduler_components/logprob_result_processor.py:49, length
checked at :246-248), the value of position p being log P(id_p | ids before p), except the first
entry's, which is None: SGLang computes from position `logprob_start_len` the log-prob of the
*next* id and shifts by one (`[None] + values[:-1]`, :37). So start - 1 gives exactly the
entries of positions start..len-1 after that None, and the client takes the tail of that length,
as slime's reader does (on_policy_distillation.py:49-56). The prefix cache cannot swallow those
positions (managers/schedule_batch.py:1228-1232); a `logprob_start_len` beyond the input is a
400 (managers/scheduler.py:2241-2246, entrypoints/http_server.py:833-835). The values are
log_softmax of the *unscaled* logits (layers/logits_processor.py:710-711): `temperature` in the
sampling params does not apply to them, so `score` accepts only temperature 1.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import math
import uuid
from array import array
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp

from evolving_rl.clients.http import (
    Retry,
    RetryPolicy,
    ServerError,
    TransportError,
    get_json,
    new_session,
    post_json,
    post_ok,
)
from evolving_rl.config.schema import ClientConfig, SamplingConfig
from evolving_rl.core.nucleus import Nucleus, nucleus_problem
from evolving_rl.core.samples import PrefixCacheCounts
from evolving_rl.core.strenum import StrEnum

logger = logging.getLogger(__name__)

ABORT_TIMEOUT_S = 5.0
NUCLEUS_ID_KEYS = ("top_p_token_ids", "top_p_kept_token_ids")
NUCLEUS_OFFSET_KEYS = ("top_p_token_offsets", "top_p_kept_token_offsets")


class PolicyError(RuntimeError):
    """The policy server gave no usable generation (transport, HTTP or format error)."""


class FinishReason(StrEnum):
    STOP = "stop"  # a stop string or the end-of-sequence token
    LENGTH = "length"  # max_new_tokens reached
    ABORT = "abort"  # the server aborted the request


@dataclass(frozen=True)
class SamplingParams:
    """What one generation call may sample; `stop` strings end the turn (kept in the ids)."""

    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    stop: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, cfg: SamplingConfig, stop: tuple[str, ...] = ()) -> SamplingParams:
        return cls(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens, stop)

    def capped(self, max_new_tokens: int) -> SamplingParams:
        """The same parameters with at most `max_new_tokens` new tokens."""
        return replace(self, max_new_tokens=min(self.max_new_tokens, max_new_tokens))

    def to_sglang(self, return_nucleus: bool = False) -> dict[str, Any]:
        """SGLang's `sampling_params`; `return_nucleus` asks slime's patched SGLang for the
        nucleus of every sampled token."""
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_new_tokens": self.max_new_tokens,
        }
        if self.stop:
            params["stop"] = list(self.stop)
            params["no_stop_trim"] = True  # keep text and ids consistent
        if return_nucleus:
            params["custom_params"] = {"return_top_p_token_ids": True}
        return params


@dataclass(frozen=True)
class Generation:
    """The exact sampled ids, one log-prob per id, why sampling stopped and, under top-p
    replay, the nucleus each id was sampled from (one span per id)."""

    token_ids: tuple[int, ...]
    log_probs: tuple[float, ...]
    finish_reason: FinishReason
    nucleus: Nucleus | None = None
    prefix_cache: PrefixCacheCounts = PrefixCacheCounts()

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.log_probs):
            raise ValueError(f"{len(self.token_ids)} ids but {len(self.log_probs)} log-probs")
        if self.nucleus is not None and self.nucleus.n_tokens != len(self.token_ids):
            raise ValueError(f"{len(self.token_ids)} ids but a nucleus of "
                             f"{self.nucleus.n_tokens} spans")


class PolicyClient(Protocol):
    """Anything that samples a continuation of `prompt_ids`."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation: ...

    async def score(self, token_ids: list[int], start: int,
                    temperature: float = 1.0) -> list[float]:
        """Log-probs of `token_ids[start:]`, each given the ids before it (one forward pass, no
        sampling); the teacher of docs/design.md §4.6. `PolicyError` when it fails."""
        ...


def _int32_array(key: str, value: Any) -> list[int]:
    """An int32 array of `meta_info`: a JSON list, or base64 of native int32 bytes."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as error:
            raise PolicyError(f"meta_info.{key} is not base64: {error}") from None
        if len(raw) % 4:
            raise PolicyError(f"meta_info.{key} has {len(raw)} bytes, not whole int32 values")
        values = array("i")
        values.frombytes(raw)
        return values.tolist()
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       for v in value):
        return value
    raise PolicyError(f"meta_info.{key} is neither an int list nor base64 int32 bytes")


def _first_present(meta: dict[str, Any], keys: tuple[str, ...]) -> list[int] | None:
    for key in keys:
        if meta.get(key) is not None:
            return _int32_array(key, meta[key])
    return None


def parse_nucleus(meta: dict[str, Any], n_tokens: int) -> Nucleus | None:
    """The nucleus of `n_tokens` sampled ids from `meta_info`; None when the answer has none."""
    token_ids = _first_present(meta, NUCLEUS_ID_KEYS)
    offsets = _first_present(meta, NUCLEUS_OFFSET_KEYS)
    if token_ids is None and offsets is None:
        return None
    if token_ids is None or offsets is None:
        raise PolicyError("SGLang top-p replay must include both token ids and offsets")
    problem = nucleus_problem(token_ids, offsets, n_tokens)
    if problem:
        raise PolicyError(f"malformed top-p nucleus: {problem}")
    return Nucleus(tuple(token_ids), tuple(offsets))


def parse_sglang_response(data: dict[str, Any], nucleus_required: bool = False) -> Generation:
    """Read ids, log-probs, the finish reason and any nucleus from a `/generate` answer;
    `nucleus_required`: a non-empty, non-aborted generation without a nucleus is an error."""
    meta = data.get("meta_info")
    if not isinstance(meta, dict):
        raise PolicyError("SGLang answer has no meta_info")
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise PolicyError("SGLang answer has no output_token_logprobs (return_logprob off?)")
    try:
        log_probs = tuple(float(entry[0]) for entry in entries)
        token_ids = tuple(int(entry[1]) for entry in entries)
    except (TypeError, ValueError, IndexError) as error:
        raise PolicyError(f"malformed output_token_logprobs: {error}") from None
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    try:
        reason = FinishReason(kind)
    except ValueError:
        raise PolicyError(f"unknown finish_reason {finish!r}") from None
    nucleus = parse_nucleus(meta, len(token_ids))
    cache = PrefixCacheCounts(_count(meta, "prompt_tokens"), _count(meta, "cached_tokens"))
    if nucleus is None and nucleus_required and token_ids and reason is not FinishReason.ABORT:
        raise PolicyError(
            "SGLang returned no top_p_token_ids although custom_params.return_top_p_token_ids "
            "was set: --rollout-top-p < 1 needs slime's SGLang top-p patch "
            "(slime docker/patch/latest/sglang-top_p.patch)")
    return Generation(token_ids, log_probs, reason, nucleus, cache)


def _count(meta: dict[str, Any], key: str) -> int:
    """A token count of `meta_info` (SGLang's tokenizer_manager.py sets `prompt_tokens` and
    `cached_tokens` on every answer); 0 when absent."""
    value = meta.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PolicyError(f"meta_info.{key} is {value!r}, not a token count")
    return value


def parse_scored_log_probs(data: dict[str, Any], n_tokens: int) -> list[float]:
    """The last `n_tokens` values of a scoring answer's `meta_info.input_token_logprobs`, as
    slime's OPD reader takes the tail (slime/rollout/on_policy_distillation.py:49-56); each one
    a finite float, else `PolicyError`."""
    meta = data.get("meta_info")
    entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(entries, list):
        raise PolicyError("SGLang scoring answer has no meta_info.input_token_logprobs "
                          "(return_logprob off, or not an SGLang /generate answer?)")
    if len(entries) < n_tokens:
        raise PolicyError(f"SGLang scored {len(entries)} input tokens, {n_tokens} asked for "
                          "(logprob_start_len ignored?)")
    tail = entries[len(entries) - n_tokens:]
    try:
        values = [entry[0] for entry in tail]
    except (TypeError, IndexError, KeyError) as error:
        raise PolicyError(f"malformed input_token_logprobs: {error}") from None
    bad = [i for i, v in enumerate(values) if isinstance(v, bool)
           or not isinstance(v, (int, float)) or not math.isfinite(v)]
    if bad:
        raise PolicyError(f"SGLang scored {len(bad)} of {n_tokens} tokens without a finite "
                          f"log-prob (first: position {bad[0]} of the scored tail, "
                          f"{values[bad[0]]!r})")
    return [float(v) for v in values]


class SGLangPolicyClient:
    """`PolicyClient` over SGLang's native `/generate` (directly or through its router);
    `top_p_replay` asks for the nucleus of every top-p < 1 generation (module docstring)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, cfg: ClientConfig,
                 top_p_replay: bool = False) -> None:
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._cfg = cfg
        self._retry = RetryPolicy(cfg.max_retries, cfg.retry_backoff_s)
        self._top_p_replay = top_p_replay

    @classmethod
    def open(cls, base_url: str, cfg: ClientConfig,
             top_p_replay: bool = False) -> SGLangPolicyClient:
        """A client with its own connection pool; call inside the event loop, `close` after."""
        return cls(new_session(cfg.pool_size, cfg.policy_timeout_s), base_url, cfg, top_p_replay)

    async def close(self) -> None:
        await self._session.close()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        replay = self._top_p_replay and sampling.top_p < 1.0
        data = await self._post_generate({
            "input_ids": list(prompt_ids),
            "sampling_params": sampling.to_sglang(return_nucleus=replay),
            "return_logprob": True})
        return parse_sglang_response(data, nucleus_required=replay)

    async def score(self, token_ids: list[int], start: int,
                    temperature: float = 1.0) -> list[float]:
        """Log-probs of `token_ids[start:]` by one prefill (module docstring, "Scoring");
        `ValueError` for a `start` outside [1, len) or a temperature SGLang cannot apply."""
        if not 1 <= start < len(token_ids):
            raise ValueError(f"score: start {start} outside [1, {len(token_ids)}): the first "
                             "token has no log-prob and at least one token must be scored")
        if temperature != 1.0:
            raise ValueError(f"score: temperature {temperature}: SGLang's input-token log-probs "
                             "are those of the unscaled logits (see the module docstring)")
        data = await self._post_generate({
            "input_ids": list(token_ids),
            "sampling_params": {"max_new_tokens": 0, "temperature": temperature},
            "return_logprob": True, "logprob_start_len": start - 1})
        return parse_scored_log_probs(data, len(token_ids) - start)

    async def _post_generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` with its own rid to `/generate`; the rid is aborted on cancel or timeout."""
        rid = uuid.uuid4().hex
        try:
            return await post_json(self._session, f"{self._base_url}/generate",
                                   {"rid": rid, **body}, retry=Retry.CONNECT, policy=self._retry,
                                   timeout_s=self._cfg.policy_timeout_s)
        except asyncio.CancelledError:
            await asyncio.shield(self._abort(rid))
            raise
        except (TransportError, ServerError) as error:
            if isinstance(error, TransportError) and isinstance(
                    error.__cause__, asyncio.TimeoutError):
                await asyncio.shield(self._abort(rid))
            raise PolicyError(str(error)) from error

    async def _abort(self, rid: str) -> None:
        """Ask the server(s) to stop request `rid`; best effort: I/O failures are only logged."""
        targets = await self._abort_targets()
        results = await asyncio.gather(
            *(post_ok(self._session, f"{url}/abort_request", {"rid": rid},
                      timeout_s=ABORT_TIMEOUT_S) for url in targets), return_exceptions=True)
        for url, result in zip(targets, results, strict=True):
            if isinstance(result, (TransportError, ServerError)):
                logger.warning("abort of request %s at %s failed: %s", rid, url, result)
            elif isinstance(result, BaseException):
                raise result

    async def _abort_targets(self) -> list[str]:
        """The router's workers (`GET /workers`), or the server itself when it lists none."""
        try:
            listing = await get_json(self._session, f"{self._base_url}/workers",
                                     timeout_s=ABORT_TIMEOUT_S)
        except (TransportError, ServerError):
            return [self._base_url]  # a plain SGLang server has no /workers
        workers = listing.get("workers")
        urls = [w["url"].rstrip("/") for w in workers if isinstance(w, dict)
                and isinstance(w.get("url"), str)] if isinstance(workers, list) else []
        return urls or [self._base_url]
