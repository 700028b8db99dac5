"""A `PolicyClient` over an OpenAI-compatible `/v1/completions` endpoint — for evaluation only.

Owns `OpenAICompletionsClient`. The prompt goes as token ids (`"prompt": [ids]`, which vLLM and
SGLang's OpenAI server accept), greedy or sampled as asked, with the adapter's stop strings
(`include_stop_str_in_output` keeps them, as SGLang's `no_stop_trim` does). Such endpoints return
text, not the sampled ids: the text is encoded again with the evaluation's tokenizer and every
log-prob is 0.0. That is fine to score an episode and never fine to train on — the trainers take
generations from `SGLangPolicyClient` or the local policy only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from evolving_rl.clients.http import (
    Retry,
    RetryPolicy,
    ServerError,
    TransportError,
    new_session,
    post_json,
)
from evolving_rl.clients.policy import FinishReason, Generation, PolicyError, SamplingParams
from evolving_rl.config.schema import ClientConfig

FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}


def completions_body(model: str, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
    """The `/v1/completions` request of one generation."""
    body: dict[str, Any] = {"model": model, "prompt": list(prompt_ids),
                            "max_tokens": sampling.max_new_tokens,
                            "temperature": sampling.temperature, "top_p": sampling.top_p}
    if sampling.top_k > 0:
        body["top_k"] = sampling.top_k
    if sampling.stop:
        body["stop"] = list(sampling.stop)
        body["include_stop_str_in_output"] = True
    return body


def parse_completion(data: dict[str, Any], encode: Callable[[str], list[int]]) -> Generation:
    """The first choice's text, encoded again (log-probs 0.0: see the module docstring)."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise PolicyError("completions answer without choices")
    text = choices[0].get("text")
    if not isinstance(text, str):
        raise PolicyError("completions answer: choices[0].text is not a string")
    ids = encode(text)
    reason = FINISH.get(str(choices[0].get("finish_reason")), FinishReason.STOP)
    return Generation(tuple(ids), (0.0,) * len(ids), reason)


class OpenAICompletionsClient:
    """`PolicyClient` over `<base_url>/v1/completions` (module docstring)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str,
                 encode: Callable[[str], list[int]], cfg: ClientConfig) -> None:
        self._session, self._base_url, self._model = session, base_url.rstrip("/"), model
        self._encode, self._cfg = encode, cfg
        self._retry = RetryPolicy(cfg.max_retries, cfg.retry_backoff_s)

    @classmethod
    def open(cls, base_url: str, model: str, encode: Callable[[str], list[int]],
             cfg: ClientConfig) -> OpenAICompletionsClient:
        """A client with its own connection pool; call inside the event loop, `close` after."""
        return cls(new_session(cfg.pool_size, cfg.policy_timeout_s), base_url, model, encode, cfg)

    async def close(self) -> None:
        await self._session.close()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        body = completions_body(self._model, prompt_ids, sampling)
        try:
            data = await post_json(self._session, f"{self._base_url}/v1/completions", body,
                                   retry=Retry.CONNECT, policy=self._retry,
                                   timeout_s=self._cfg.policy_timeout_s)
        except (TransportError, ServerError) as error:
            raise PolicyError(str(error)) from error
        return parse_completion(data, self._encode)
