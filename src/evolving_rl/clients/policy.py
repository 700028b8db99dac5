"""The policy client: one interface for sampling tokens, and its SGLang implementation.

Owns `SamplingParams`, `Generation` and the `PolicyClient` protocol the episode loop calls,
plus `SGLangPolicyClient`, which posts token ids to SGLang's `/generate` with
`return_logprob: true` and reads the sampled ids and log-probs back from
`meta_info.output_token_logprobs` ([logprob, token id, text] per token). Nothing is ever
re-tokenised. Every request carries its own `rid`; when the calling task is cancelled (an episode
aborted), the client posts `/abort_request {"rid": ...}` so SGLang stops generating for nobody.
A generation is retried only when the connection was refused before the request was sent.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp

from evolving_rl.clients.http import (
    Retry,
    RetryPolicy,
    ServerError,
    TransportError,
    new_session,
    post_json,
)
from evolving_rl.config.schema import ClientConfig, SamplingConfig
from evolving_rl.core.strenum import StrEnum

logger = logging.getLogger(__name__)

ABORT_TIMEOUT_S = 5.0


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

    def to_sglang(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_new_tokens": self.max_new_tokens,
        }
        if self.stop:
            params["stop"] = list(self.stop)
            params["no_stop_trim"] = True  # keep text and ids consistent
        return params


@dataclass(frozen=True)
class Generation:
    """The exact sampled ids, one log-prob per id, and why sampling stopped."""

    token_ids: tuple[int, ...]
    log_probs: tuple[float, ...]
    finish_reason: FinishReason

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.log_probs):
            raise ValueError(f"{len(self.token_ids)} ids but {len(self.log_probs)} log-probs")


class PolicyClient(Protocol):
    """Anything that samples a continuation of `prompt_ids`."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation: ...


def parse_sglang_response(data: dict[str, Any]) -> Generation:
    """Read ids, log-probs and the finish reason from a `/generate` answer."""
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
    return Generation(token_ids, log_probs, reason)


class SGLangPolicyClient:
    """`PolicyClient` over SGLang's native `/generate` (directly or through its router)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, cfg: ClientConfig) -> None:
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._cfg = cfg
        self._retry = RetryPolicy(cfg.max_retries, cfg.retry_backoff_s)

    @classmethod
    def open(cls, base_url: str, cfg: ClientConfig) -> SGLangPolicyClient:
        """A client with its own connection pool; call inside the event loop, `close` after."""
        return cls(new_session(cfg.pool_size, cfg.policy_timeout_s), base_url, cfg)

    async def close(self) -> None:
        await self._session.close()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        rid = uuid.uuid4().hex
        body = {"rid": rid, "input_ids": list(prompt_ids),
                "sampling_params": sampling.to_sglang(), "return_logprob": True}
        try:
            data = await post_json(self._session, f"{self._base_url}/generate", body,
                                   retry=Retry.CONNECT, policy=self._retry,
                                   timeout_s=self._cfg.policy_timeout_s)
        except asyncio.CancelledError:
            await asyncio.shield(self._abort(rid))
            raise
        except (TransportError, ServerError) as error:
            if isinstance(error, TransportError) and isinstance(
                    error.__cause__, asyncio.TimeoutError):
                await asyncio.shield(self._abort(rid))
            raise PolicyError(str(error)) from error
        return parse_sglang_response(data)

    async def _abort(self, rid: str) -> None:
        """Ask the server to stop request `rid`; best effort, never raises."""
        try:
            await post_json(self._session, f"{self._base_url}/abort_request", {"rid": rid},
                            retry=Retry.NONE, policy=self._retry, timeout_s=ABORT_TIMEOUT_S)
        except (TransportError, ServerError) as error:
            logger.warning("abort of request %s failed: %s", rid, error)
