"""The one sampler of both decoders (`local.engine.sampling`): both decode paths sample the same
tokens from the same logits and seed, top-k 1 and a tiny top-p are greedy, and draws follow the
filtered distribution.

The dynamic decoder samples its rows in row order (`sample_tokens`); the static decoder holds
the same rows in scattered slots of its buffers, draws the same uniforms into the sampled rows'
slots and samples every slot at once (`draw_uniforms`, then `sample_rows`). Over several steps of
one generator per path, the tokens of each row must be equal.
"""

from __future__ import annotations

import torch

from evolving_rl.clients.policy import SamplingParams
from evolving_rl.local.engine.sampling import draw_uniforms, filters, sample_rows, sample_tokens

VOCAB = 300
SLOTS = 8
ROW_SLOTS = [5, 0, 3, 6, 2, 7]  # the slot of each row, as a static decoder assigns them
GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=1)


def _sampling(temperature: float, top_p: float = 1.0, top_k: int = -1) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=1)


MIXED = [_sampling(0.0), _sampling(1.0), _sampling(0.7, top_p=0.9), _sampling(1.3, top_k=7),
         _sampling(1.0, top_p=0.5, top_k=20), _sampling(0.0, top_p=0.3, top_k=2)]
PLAIN = [_sampling(1.0), _sampling(0.0), _sampling(0.8), _sampling(1.2), _sampling(1.0),
         _sampling(0.5)]
SAMPLED = [_sampling(1.0), _sampling(0.9, top_k=5), _sampling(1.0), _sampling(1.1, top_p=0.7),
           _sampling(0.6), _sampling(1.0, top_k=1)]  # no greedy row


def _static_step(logits: torch.Tensor, samplings: list[SamplingParams],
                 generator: torch.Generator) -> torch.Tensor:
    """The static decoder's sampling of one step: rows in `ROW_SLOTS` of the slot buffers (free
    slots hold other logits at temperature 0), this step's uniforms drawn into the sampled rows'
    slots, every slot sampled at once; the tokens of the rows, in row order."""
    slots = torch.tensor(ROW_SLOTS)
    slot_logits = torch.randn(SLOTS, VOCAB).index_copy(0, slots, logits)
    buffers = {"temperature": torch.zeros(SLOTS), "top_k": torch.zeros(SLOTS, dtype=torch.long),
               "top_p": torch.ones(SLOTS)}
    for name, buffer in buffers.items():
        buffer.index_copy_(0, slots, torch.tensor([getattr(s, name) for s in samplings],
                                                  dtype=buffer.dtype))
    uniforms = torch.zeros(SLOTS)
    draws = draw_uniforms(samplings, generator, logits.device)
    if draws is not None:
        sampled = [slot for slot, s in zip(ROW_SLOTS, samplings, strict=True)
                   if s.temperature != 0.0]
        uniforms.index_copy_(0, torch.tensor(sampled), draws)
    tokens = sample_rows(slot_logits, buffers["temperature"], buffers["top_k"], buffers["top_p"],
                         uniforms, filters(samplings))
    return tokens[slots]


def test_both_decode_paths_sample_the_same_tokens():
    for samplings in (MIXED, PLAIN, SAMPLED, [GREEDY] * len(ROW_SLOTS)):
        dynamic, static = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        logits_of = torch.Generator().manual_seed(0)
        for _ in range(4):  # several steps: both paths consume their generator alike
            logits = torch.randn(len(samplings), VOCAB, generator=logits_of) * 3
            assert (sample_tokens(logits, samplings, dynamic).tolist()
                    == _static_step(logits, samplings, static).tolist())


def test_unfiltered_rows_sample_alike_with_or_without_the_filters():
    logits = torch.randn(len(PLAIN), VOCAB, generator=torch.Generator().manual_seed(2)) * 3
    uniforms = torch.rand(len(PLAIN), generator=torch.Generator().manual_seed(4))
    settings = (torch.tensor([s.temperature for s in PLAIN]),
                torch.full((len(PLAIN),), -1), torch.ones(len(PLAIN)), uniforms)
    assert not filters(PLAIN)
    assert (sample_rows(logits, *settings, filtered=True).tolist()
            == sample_rows(logits, *settings, filtered=False).tolist())


def test_top_k_one_and_a_tiny_top_p_are_greedy():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    top1 = _sampling(1.0, top_k=1)
    tight = _sampling(0.7, top_p=1e-6)
    tokens = sample_tokens(logits, [top1, tight, GREEDY], torch.Generator().manual_seed(1))
    assert tokens.tolist() == logits.argmax(-1).tolist()


def test_sampling_follows_the_filtered_distribution():
    """20k draws each: frequencies within 0.015 of the probabilities; filtered-out tokens never
    (top-k 4 drops the two least likely; top-p 0.8 keeps the tokens before 0.8 of the mass)."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0, 0.5]])
    inf = float("-inf")
    cases = [(_sampling(1.0, top_k=4), torch.tensor([2.0, 1.0, 0.0, inf, inf, 0.5])),
             (_sampling(1.0, top_p=0.8), torch.tensor([2.0, 1.0, inf, inf, inf, 0.5]))]
    for sampling, kept in cases:
        rows = logits.expand(20_000, -1)  # one row per draw, one step
        draws = sample_tokens(rows, [sampling] * len(rows), torch.Generator().manual_seed(3))
        freq = torch.bincount(draws, minlength=6).float() / draws.numel()
        assert freq[kept == inf].sum() == 0
        torch.testing.assert_close(freq, torch.softmax(kept, -1), atol=0.015, rtol=0)
