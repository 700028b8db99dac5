"""Every local decode path on each architecture the profiles run: Llama (SmolLM2) and Qwen2
(Qwen2.5: q/k/v projections with biases; tied embeddings at 0.5B, untied in larger models).

The growing-cache and static-slot decoders (left padding, prefix reuse, position ids from the
mask, grouped-query decode attention) must sample log-probs equal to transformers' own full
forward over prompt + generation, greedy rows must pick that forward's argmax, and the trainer's
log-probs must equal it too. Compared within tolerance, never bit for bit: two code paths.
"""

from __future__ import annotations

import pytest
import torch
from local_helpers import ARCHITECTURES, PAD_ID, VOCAB, local_policy, make_sample

from evolving_rl.clients.policy import SamplingParams
from evolving_rl.config.schema import LossConfig
from evolving_rl.core.roles import Role
from evolving_rl.local.trainer import build_token_batch, token_log_probs

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _prompts(lengths: tuple[int, ...], seed: int = 1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in lengths]


def _sampling(temperature: float) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=16)


def _full_forward(model, prompt: list[int], generated: tuple[int, ...]) -> torch.Tensor:
    """Log-softmax of transformers' own forward at the positions that predicted `generated`."""
    ids = torch.tensor([prompt + list(generated)], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
    return logits.float().log_softmax(-1).cpu()


def _check_against_forward(model, prompts, generations, samplings, atol: float) -> None:
    for prompt, generation, sampling in zip(prompts, generations, samplings, strict=True):
        assert generation.token_ids
        full = _full_forward(model, prompt, generation.token_ids)
        tokens = torch.tensor(generation.token_ids)
        forced = full.gather(1, tokens[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(generation.log_probs), forced, atol=atol, rtol=0)
        if sampling.temperature == 0.0:  # greedy: the forward's best token, up to a near-tie
            assert bool((forced >= full.max(-1).values - atol).all())


@pytest.mark.parametrize("backend", ["dynamic", "static"])
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_decoded_log_probs_equal_the_full_forward(tokenizer, arch, backend):
    model = ARCHITECTURES[arch]()
    policy = local_policy(model, tokenizer, seed=3, decode_backend=backend, max_batch_generate=8,
                          static_cache_tokens=128)
    prompts = _prompts((20, 7, 33, 12, 5))
    samplings = [_sampling(t) for t in (1.0, 0.0, 1.0, 0.0, 0.7)]
    generations = policy.generate_batch(prompts, samplings)
    _check_against_forward(model, prompts, generations, samplings, atol=1e-4)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_prefix_reuse_keeps_the_full_forward(tokenizer, arch):
    """Turn 2 extends turn 1's context: its stored KV is reused, its log-probs stay exact."""
    model = ARCHITECTURES[arch]()
    policy = local_policy(model, tokenizer, seed=4, prefix_cache_entries=8)
    first = _prompts((18, 25), seed=2)
    turn1 = policy.generate_batch(first, [_sampling(1.0)] * 2)
    second = [p + list(g.token_ids) + [3, 4, 5] for p, g in zip(first, turn1, strict=True)]
    turn2 = policy.generate_batch(second, [_sampling(1.0)] * 2)
    assert policy.prefixes.hits == 2
    _check_against_forward(model, second, turn2, [_sampling(1.0)] * 2, atol=1e-4)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_trainer_log_probs_equal_the_full_forward(arch):
    model = ARCHITECTURES[arch]()
    samples = [make_sample(Role.SOLVER, 12 + i, 9, 1.0, seed=i) for i in range(3)]
    tokens = build_token_batch(samples, LossConfig(), PAD_ID, "cpu")
    with torch.no_grad():
        got, _ = token_log_probs(model, tokens)
        logits = model(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).logits
    full = torch.log_softmax(logits.float(), -1)[tokens.rows, tokens.cols - 1]
    torch.testing.assert_close(got, full.gather(1, tokens.targets[:, None])[:, 0],
                               atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_cuda_graphs_bf16_equal_the_full_forward(tokenizer, arch):
    """bf16 on a GPU: static slots replayed as CUDA graphs; tolerance of bf16 logits."""
    model = ARCHITECTURES[arch]().to("cuda", torch.bfloat16)
    policy = local_policy(model, tokenizer, seed=3, decode_backend="static",
                          static_cache_tokens=256)
    prompts = _prompts((20, 7, 33))
    samplings = [_sampling(1.0), _sampling(1.0), _sampling(0.7)]
    generations = policy.generate_batch(prompts, samplings)
    assert policy._engine.graphs
    _check_against_forward(model, prompts, generations, samplings, atol=0.1)
