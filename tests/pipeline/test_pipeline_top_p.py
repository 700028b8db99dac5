"""Top-p replay through the pipeline: a rollout against the fake SGLang server, whose nucleus the
real policy client reads, gives every sample a response-aligned nucleus — the server's spans on
generated tokens, empty spans on observation and reply-prefix tokens inside the response."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from env.launch import free_port
from evolving_rl.clients.policy import SGLangPolicyClient
from evolving_rl.core.nucleus import Nucleus
from evolving_rl.core.roles import Role
from evolving_rl.domains.base import EpisodeTrace
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.sglang_server import FakeSGLang, top_p_span
from tests.fakes.tokenizer import ByteChatTokenizer

PREFIX = "<reasoning>"
TOP_P = 0.9


def _config():
    cfg = small_config(solver_reply_prefix=PREFIX, train_on_source_episode=True)
    sampling = replace(cfg.sampling, solver=replace(cfg.sampling.solver, top_p=TOP_P),
                       extractor=replace(cfg.sampling.extractor, top_p=TOP_P))
    return replace(cfg, sampling=sampling)


async def _rollout(tmp_path, replay: bool, nucleus_base64: bool = False):
    fake = FakeSGLang(nucleus_base64=nucleus_base64)
    url = await fake.start(free_port())
    cfg = _config()
    policy = SGLangPolicyClient.open(url, cfg.clients, top_p_replay=replay)
    try:
        ctx = fake_context(tmp_path, cfg, policy=policy)
        outcome = await run_training_rollout(ctx, toy_rows(2), rollout_id=0)
        return outcome.samples, fake.requests
    finally:
        await policy.close()
        await fake.stop()


@pytest.mark.parametrize("nucleus_base64", [False, True], ids=["list", "base64"])
def test_every_sample_carries_the_servers_spans_on_generated_tokens_only(tmp_path,
                                                                       nucleus_base64):
    samples, requests = asyncio.run(_rollout(tmp_path, True, nucleus_base64))
    assert {r["sampling_params"]["top_p"] for r in requests} == {TOP_P}
    assert all(r["sampling_params"]["custom_params"] == {"return_top_p_token_ids": True}
               for r in requests)
    assert {s.role for s in samples} == {Role.SOLVER, Role.EXTRACTOR}
    prefix = ByteChatTokenizer().encode_text(PREFIX)
    multi_turn = 0
    for sample in samples:
        nucleus = sample.nucleus
        assert nucleus is not None and nucleus.n_tokens == sample.response_length
        for i, (token, mask) in enumerate(zip(sample.response_ids, sample.loss_mask,
                                              strict=True)):
            assert nucleus.span(i) == (top_p_span(token) if mask else ())
        if 0 in sample.loss_mask:
            multi_turn += 1
            first_obs = sample.loss_mask.index(0)
            block_end = sample.loss_mask.index(1, first_obs)
            assert sample.response_ids[block_end - len(prefix):block_end] == prefix
    assert multi_turn > 0  # observation blocks (ending with the reply prefix) were exercised


def test_without_replay_nothing_is_asked_and_no_sample_has_a_nucleus(tmp_path):
    samples, requests = asyncio.run(_rollout(tmp_path, False))
    assert samples and all(s.nucleus is None for s in samples)
    assert all("custom_params" not in r["sampling_params"] for r in requests)


def test_a_trace_never_mixes_generations_with_and_without_a_nucleus():
    trace = EpisodeTrace([1, 2])
    trace.add_generation([5, 6], [-0.1, -0.2])
    trace.add_observation([7])
    with pytest.raises(ValueError, match="carries a nucleus, or none does"):
        trace.add_generation([8], [-0.3], Nucleus((8,), (0, 1)))
    assert trace.nucleus is None

    replayed = EpisodeTrace([1, 2])
    replayed.add_generation([5, 6], [-0.1, -0.2], Nucleus((5, 9, 6), (0, 2, 3)))
    replayed.add_observation([7])
    with pytest.raises(ValueError, match="carries a nucleus, or none does"):
        replayed.add_generation([8], [-0.3])
    assert replayed.nucleus == Nucleus((5, 9, 6), (0, 2, 3, 3))
