"""benchmarks/skill_use_probe.py's scorer: candidates scored after one cached context give the
log-probs of each whole sequence's own forward pass (different lengths, right-padded)."""

from __future__ import annotations

import torch
from local_helpers import VOCAB, tiny_llama

from benchmarks.skill_use_probe import Scorer


class _Ids:
    """The two encodings the scorer asks for; it never decodes."""

    def encode_text(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def _full_forward(model, context: list[int], candidate: list[int]) -> float:
    ids = torch.tensor([context + candidate])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)[0]
    return sum(float(logp[len(context) - 1 + i, t]) for i, t in enumerate(candidate))


def test_cached_context_scores_equal_whole_sequence_forwards():
    model = tiny_llama()
    generator = torch.Generator().manual_seed(1)
    context = torch.randint(3, VOCAB, (23,), generator=generator).tolist()
    candidates = [torch.randint(3, VOCAB, (n,), generator=generator).tolist() for n in (1, 4, 7)]
    scores = Scorer(model, _Ids(), "").log_probs(context, candidates)
    for score, candidate in zip(scores, candidates, strict=True):
        assert abs(score - _full_forward(model, context, candidate)) < 1e-4
    assert len({round(s, 3) for s in scores}) == 3
