"""Teacher scoring in the engine: the log-probs of given tokens, one forward pass, no sampling.

Owns `score_tokens`, what `LocalPolicy.score` runs in the engine thread (docs/design.md §4.6):
raw-model log-probs (temperature 1, the quantity the trainer recomputes) of `token_ids[start:]`,
each given the ids before it. Logits are formed only at the scored positions, `chunk` positions at
a time, so a vocabulary-wide tensor of at most `chunk` rows is alive.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

SCORE_CHUNK = 512


@torch.no_grad()
def score_tokens(model: torch.nn.Module, token_ids: Sequence[int], start: int,
                 chunk: int = SCORE_CHUNK) -> list[float]:
    """Log-probs of `token_ids[start:]` under `model` (1 <= start <= len(token_ids))."""
    if not 1 <= start <= len(token_ids):
        raise ValueError(f"start must be in [1, {len(token_ids)}], got {start}")
    if start == len(token_ids):
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
    hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state[0]
    states, targets = hidden[start - 1:-1], ids[0, start:]
    head = model.get_output_embeddings()
    out = [torch.log_softmax(head(part).float(), dim=-1).gather(1, target[:, None])[:, 0]
           for part, target in zip(states.split(chunk), targets.split(chunk), strict=True)]
    return torch.cat(out).tolist()
