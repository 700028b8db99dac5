"""The static-slot decoder against the dynamic one: same token ids and log-probs (greedy, and
sampled with one seed under temperature, top-k and top-p), slot reuse under continuous
batching, prefix reuse, the capacity limit, and the fused RMSNorm of the GPU path (the sampling
both decoders share: `test_sampling.py`).

Both decoders draw the same uniforms in the same order, so sampled ids are compared exactly;
log-probs are compared within 1e-5 (the two paths attend over differently padded KV, float32).
The CUDA test (skipped without a GPU) replays captured graphs; `bfloat16` there is compared
on log-probs of the same forced tokens, since bf16 rounding may flip a near-tie.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from local_helpers import VOCAB, local_policy, tiny_llama

from evolving_rl.clients.policy import FinishReason, SamplingParams
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.engine.fused_norm import use_fused_rms_norm
from evolving_rl.local.engine.slot_engine import bucket_for, buckets
from evolving_rl.local.engine.static_decode import StaticDecoder

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _prompts(lengths: tuple[int, ...], seed: int = 1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in lengths]


def _sampling(temperature: float, top_p: float = 1.0, top_k: int = -1,
              new: int = 24) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=new)


def _both(model, tokenizer, prompts, samplings, **kwargs):
    """generate_batch through each backend on a fresh policy of the same seed."""
    return [local_policy(model, tokenizer, seed=3, decode_backend=backend, **kwargs)
            .generate_batch(prompts, samplings) for backend in ("dynamic", "static")]


def _assert_same(dynamic, static) -> None:
    for d, s in zip(dynamic, static, strict=True):
        assert s.token_ids == d.token_ids and s.finish_reason == d.finish_reason
        torch.testing.assert_close(torch.tensor(s.log_probs), torch.tensor(d.log_probs),
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_static_equals_dynamic(tokenizer, temperature):
    model = tiny_llama()
    prompts = _prompts((20, 7, 33, 12, 5))
    samplings = [_sampling(temperature, top_p=(1.0, 0.9, 0.6)[i % 3], top_k=(-1, 5)[i % 2])
                 for i in range(len(prompts))]
    dynamic, static = _both(model, tokenizer, prompts, samplings, max_batch_generate=8,
                            static_cache_tokens=128)
    assert sum(len(g.token_ids) for g in static) > 3 * len(prompts)  # not all stopped at once
    _assert_same(dynamic, static)


def test_slots_are_reused_by_rows_admitted_later(tokenizer):
    """Six greedy prompts through two slots: rows join as others finish (their own lengths)."""
    model = tiny_llama()
    prompts = _prompts((9, 14, 3, 21, 6, 11), seed=2)
    samplings = [_sampling(0.0, new=4 + 3 * i) for i in range(len(prompts))]
    dynamic, static = _both(model, tokenizer, prompts, samplings, max_batch_generate=2,
                            static_cache_tokens=128)
    _assert_same(dynamic, static)


async def _turns(policy: LocalPolicy, prompt: list[int], turns: int) -> list[tuple[int, ...]]:
    """A multi-turn episode: each prompt extends the previous one and its reply."""
    replies = []
    for turn in range(turns):
        generation = await policy.generate(prompt, _sampling(0.0, new=6))
        replies.append(generation.token_ids)
        prompt = prompt + list(generation.token_ids) + [10 + turn, 11, 12]
    return replies


async def _episodes(policy: LocalPolicy, prompts) -> list[list[tuple[int, ...]]]:
    try:
        return await asyncio.gather(*(_turns(policy, p, 3) for p in prompts))
    finally:
        await policy.close()


def test_concurrent_episodes_with_prefix_reuse(tokenizer):
    model = tiny_llama()
    prompts = _prompts((18, 25, 20))
    results = {}
    for backend in ("dynamic", "static"):
        policy = local_policy(model, tokenizer, max_batch_generate=4, batch_window_s=0.01,
                              prefix_cache_entries=8, decode_backend=backend,
                              static_cache_tokens=128)
        results[backend] = asyncio.run(_episodes(policy, prompts))
        assert policy.prefixes.reused_tokens > 0
    assert results["static"] == results["dynamic"]


def test_capacity_ends_a_row_with_length(tokenizer):
    model = tiny_llama()
    policy = local_policy(model, tokenizer, decode_backend="static", static_cache_tokens=128)
    long, short = _prompts((200, 120))
    over, near = policy.generate_batch([long, short], [_sampling(0.0, new=50)] * 2)
    assert len(over.token_ids) == 1 and over.finish_reason is FinishReason.LENGTH
    assert len(near.token_ids) == 128 - 120 + 1 and near.finish_reason is FinishReason.LENGTH


def test_auto_backend_is_dynamic_on_cpu(tokenizer):
    policy = local_policy(tiny_llama(), tokenizer)
    assert not policy.static
    assert isinstance(local_policy(tiny_llama(), tokenizer, decode_backend="static")
                      .make_decoder(print), StaticDecoder)
    with pytest.raises(ValueError, match="decode_backend"):
        local_policy(tiny_llama(), tokenizer, decode_backend="fast")


def test_fused_rms_norm_equals_the_stock_norm():
    model = tiny_llama()
    ids = torch.randint(2, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    keys = set(model.state_dict())
    assert use_fused_rms_norm(model) == 2 * 2 + 1  # two per layer and the final norm
    assert set(model.state_dict()) == keys
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, atol=1e-5, rtol=0)
    with torch.no_grad():  # outside inference mode: the stock path, bit for bit
        assert torch.equal(model(input_ids=ids).logits, expected)


def test_buckets():
    assert buckets(32) == [1, 2, 4, 8, 16, 32] and buckets(6) == [1, 2, 4, 6]
    assert buckets(512, 128) == [128, 256, 512]
    assert bucket_for(5, buckets(32)) == 8 and bucket_for(129, buckets(512, 128)) == 256


@pytest.mark.gpu
@CUDA
def test_cuda_graphs_equal_dynamic(tokenizer):
    model = tiny_llama().cuda()
    prompts = _prompts((20, 7, 33, 12, 5))
    samplings = [_sampling(0.0), _sampling(1.0), _sampling(0.7, top_p=0.9), _sampling(1.0, top_k=5),
                 _sampling(0.0)]
    dynamic, static = _both(model, tokenizer, prompts, samplings, max_batch_generate=8,
                            static_cache_tokens=256)
    for d, s in zip(dynamic, static, strict=True):  # one CUDA generator: same uniforms
        assert s.token_ids == d.token_ids
        torch.testing.assert_close(torch.tensor(s.log_probs), torch.tensor(d.log_probs),
                                   atol=1e-4, rtol=0)


@pytest.mark.gpu
@CUDA
def test_cuda_graphs_bf16_forced_tokens(tokenizer):
    """bf16: the static path's log-probs of its own tokens equal a full forward's."""
    model = tiny_llama().to("cuda", torch.bfloat16)
    policy = local_policy(model, tokenizer, seed=3, decode_backend="static",
                          static_cache_tokens=256)
    prompts = _prompts((20, 7, 33))
    generations = policy.generate_batch(prompts, [_sampling(1.0)] * 3)
    assert policy._engine.graphs  # the steps replayed captured graphs
    for prompt, generation in zip(prompts, generations, strict=True):
        ids = torch.tensor([prompt + list(generation.token_ids)], device="cuda")
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
        forced = logits.log_softmax(-1).gather(1, ids[0, len(prompt):, None])[:, 0]
        torch.testing.assert_close(torch.tensor(generation.log_probs), forced.cpu(),
                                   atol=0.1, rtol=0)
