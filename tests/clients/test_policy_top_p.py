"""The policy client under top-p replay: what it asks SGLang for, and how it reads the nucleus
(JSON lists or base64 int32, both names slime accepts, every malformed answer a `PolicyError`)."""

from __future__ import annotations

import asyncio
import base64
import re
from array import array

import pytest

from env.launch import free_port
from evolving_rl.clients.policy import (
    FinishReason,
    Generation,
    PolicyError,
    SamplingParams,
    SGLangPolicyClient,
    parse_sglang_response,
)
from evolving_rl.config.schema import ClientConfig
from evolving_rl.core.nucleus import Nucleus
from tests.fakes.sglang_server import FakeSGLang, top_p_span

CFG = ClientConfig(policy_timeout_s=5, env_timeout_s=2, retrieval_timeout_s=2, max_retries=2,
                   retry_backoff_s=0.01, pool_size=4)
NUCLEUS = SamplingParams(1.0, 0.9, -1, 64, ("</action>",))
FULL = SamplingParams(1.0, 1.0, -1, 64, ("</action>",))
PROMPT = list(b"Admissible actions:\n1. go to desk 1\n")


def _b64(values: list[int]) -> str:
    return base64.b64encode(array("i", values).tobytes()).decode("ascii")


def _answer(**meta) -> dict:
    return {"meta_info": {"output_token_logprobs": [[-0.1, 7, None], [-0.2, 8, None]],
                          "finish_reason": {"type": "stop"}, **meta}}


async def _generate(replay: bool, sampling: SamplingParams, nucleus_base64: bool = False):
    fake = FakeSGLang(nucleus_base64=nucleus_base64)
    url = await fake.start(free_port())
    client = SGLangPolicyClient.open(url, CFG, top_p_replay=replay)
    try:
        return await client.generate(PROMPT, sampling), fake.requests[0]["sampling_params"]
    finally:
        await client.close()
        await fake.stop()


@pytest.mark.parametrize("nucleus_base64", [False, True], ids=["list", "base64"])
def test_replay_asks_for_the_nucleus_and_reads_it(nucleus_base64):
    generation, params = asyncio.run(_generate(True, NUCLEUS, nucleus_base64))
    assert params["custom_params"] == {"return_top_p_token_ids": True}
    assert params["top_p"] == 0.9
    nucleus = generation.nucleus
    assert nucleus is not None and nucleus.n_tokens == len(generation.token_ids) > 0
    assert [nucleus.span(i) for i in range(nucleus.n_tokens)] == [
        top_p_span(token) for token in generation.token_ids]


@pytest.mark.parametrize(("replay", "sampling"), [(False, NUCLEUS), (True, FULL)],
                         ids=["plain-endpoint", "top-p-1"])
def test_nothing_slime_specific_is_sent_unless_replaying_a_nucleus(replay, sampling):
    generation, params = asyncio.run(_generate(replay, sampling))
    assert "custom_params" not in params
    assert generation.nucleus is None and generation.token_ids


@pytest.mark.parametrize("names", [("top_p_token_ids", "top_p_token_offsets"),
                                   ("top_p_kept_token_ids", "top_p_kept_token_offsets")])
@pytest.mark.parametrize("encode", [list, _b64], ids=["list", "base64"])
def test_both_names_and_both_encodings_are_read(names, encode):
    answer = _answer(**{names[0]: encode([7, 3, 8]), names[1]: encode([0, 2, 3])})
    generation = parse_sglang_response(answer, nucleus_required=True)
    assert generation.nucleus == Nucleus((7, 3, 8), (0, 2, 3))


@pytest.mark.parametrize(("meta", "message"), [
    ({"top_p_token_ids": [7, 8]}, "both token ids and offsets"),
    ({"top_p_token_offsets": [0, 1, 2]}, "both token ids and offsets"),
    ({"top_p_token_ids": [7, 8], "top_p_token_offsets": [0, 2]}, "2 offsets for 2 tokens"),
    ({"top_p_token_ids": [7, 8], "top_p_token_offsets": [1, 1, 2]}, "start with 0"),
    ({"top_p_token_ids": [7, 8], "top_p_token_offsets": [0, 1, 3]}, "offsets[-1]=3 != 2"),
    ({"top_p_token_ids": "%%%", "top_p_token_offsets": [0, 1, 2]}, "not base64"),
    ({"top_p_token_ids": base64.b64encode(b"\x01\x02\x03").decode(),
      "top_p_token_offsets": [0, 1, 2]}, "not whole int32"),
    ({"top_p_token_ids": [7, "8"], "top_p_token_offsets": [0, 1, 2]}, "neither an int list"),
])
def test_malformed_nuclei_are_policy_errors(meta, message):
    with pytest.raises(PolicyError, match=re.escape(message)):
        parse_sglang_response(_answer(**meta))


def test_a_missing_nucleus_is_an_error_only_when_required_and_something_was_sampled():
    with pytest.raises(PolicyError, match="top-p patch"):
        parse_sglang_response(_answer(), nucleus_required=True)
    assert parse_sglang_response(_answer()).nucleus is None
    aborted = {"meta_info": {"output_token_logprobs": [[-0.1, 7, None]],
                             "finish_reason": {"type": "abort"}}}
    assert parse_sglang_response(aborted, nucleus_required=True).nucleus is None
    empty = {"meta_info": {"output_token_logprobs": [], "finish_reason": "stop"}}
    assert parse_sglang_response(empty, nucleus_required=True).token_ids == ()


def test_generation_refuses_a_nucleus_of_another_length():
    with pytest.raises(ValueError, match="a nucleus of 1 spans"):
        Generation((1, 2), (-0.1, -0.2), FinishReason.STOP, Nucleus((1,), (0, 1)))
