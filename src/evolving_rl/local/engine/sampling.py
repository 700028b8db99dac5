"""Token sampling, written once for both decoders.

Owns `draw_uniforms`, `sample_rows`, `sample_tokens` and `filters`. A row's next token is the
argmax of its logits at temperature 0; otherwise its logits are divided by the temperature,
top-k keeps the k largest (ties with the k-th kept; <= 0: off), top-p keeps the most likely
tokens until the mass before the next one reaches p (1: off), and the token is drawn by inverting
the CDF of what is left with one uniform number: the distribution of `torch.multinomial`, which
on CPU draws an exponential variate per vocabulary entry instead (docs/design.md §6.2). A
zero-probability entry is never drawn (its CDF step is empty).

`sample_rows` samples every row at once from per-row settings held in tensors, on the device and
without a host sync: the static decoder's captured step runs it on its slot buffers. The dynamic
decoder calls it through `sample_tokens`, row by row, with those tensors built from each row's
`SamplingParams`. Each step draws one uniform per sampled row (temperature > 0), in row order, in
one call (`draw_uniforms`): given the same rows in the same order and one seed, both decoders sample
the same tokens. The log-probs the decoders return are the raw model's, not these filtered ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from evolving_rl.clients.policy import SamplingParams


def filters(samplings: Sequence[SamplingParams]) -> bool:
    """Whether any of `samplings` uses top-k or top-p (else `sample_rows` may skip both)."""
    return any(0 < s.top_k or s.top_p < 1.0 for s in samplings)


def draw_uniforms(samplings: Sequence[SamplingParams], generator: torch.Generator,
                  device: torch.device) -> torch.Tensor | None:
    """One uniform number per sampled (temperature > 0) row, in row order, from one call; None
    when every row is greedy."""
    sampled = sum(s.temperature != 0.0 for s in samplings)
    return torch.rand(sampled, generator=generator, device=device) if sampled else None


def sample_rows(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                top_p: torch.Tensor, uniforms: torch.Tensor, filtered: bool = True,
                greedy: bool = True) -> torch.Tensor:
    """Per row of `logits` [rows, vocab] float: argmax where temperature is 0, else the token
    whose CDF step holds that row's uniform, under temperature, top-k and top-p (module
    docstring). `filtered=False` skips top-k and top-p (and their sorts): only for rows that use
    neither; `greedy=False` skips the argmax: only when no row has temperature 0."""
    vocab = logits.shape[-1]
    scaled = logits / torch.where(temperature > 0, temperature, 1.0)[:, None]
    probs = _filtered(scaled, top_k, top_p) if filtered else torch.softmax(scaled, dim=-1)
    cdf = probs.cumsum(-1)
    drawn = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)[:, 0]
    drawn = drawn.clamp_max(vocab - 1)
    return torch.where(temperature > 0, drawn, logits.argmax(-1)) if greedy else drawn


def _filtered(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Probabilities after top-k then top-p, row by row (off where top_k <= 0, top_p >= 1), from
    one sort of the logits: the probabilities keep that order, so both cuts read it."""
    vocab = scaled.shape[-1]
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    ordered, order = scaled.sort(-1, descending=True)
    kth = ordered.gather(1, (k - 1)[:, None])
    sorted_probs = torch.softmax(ordered.masked_fill(ordered < kth, float("-inf")), dim=-1)
    before = sorted_probs.cumsum(-1) - sorted_probs  # mass strictly before each token
    outside = (before >= top_p[:, None]) & (top_p < 1.0)[:, None]
    return torch.zeros_like(scaled).scatter(-1, order, sorted_probs.masked_fill(outside, 0.0))


def sample_tokens(logits: torch.Tensor, samplings: Sequence[SamplingParams],
                  generator: torch.Generator) -> torch.Tensor:
    """One token per row of `logits` [rows, vocab] under that row's sampling parameters: the
    dynamic decoder's call, drawing this step's uniforms from `generator`. Row by row: a greedy
    row is its argmax, a sampled row goes through `sample_rows` alone (on CPU that is faster than
    all rows at once: docs/design.md §6.2)."""
    logits = logits.float()
    uniforms = draw_uniforms(samplings, generator, logits.device)
    tokens = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
    drawn = 0
    for row, sampling in enumerate(samplings):
        if sampling.temperature == 0.0:
            tokens[row] = logits[row].argmax()
            continue
        settings = [torch.tensor([value], device=logits.device) for value in
                    (sampling.temperature, sampling.top_k, sampling.top_p)]
        tokens[row] = sample_rows(logits[row:row + 1], *settings, uniforms[drawn:drawn + 1],
                                  filters([sampling]), greedy=False)[0]
        drawn += 1
    return tokens
