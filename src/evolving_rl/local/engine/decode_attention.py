"""Grouped-query attention for one new token per row under a mask, without copying the KV.

Owns `decode_attention`, registered with transformers' `AttentionInterface` as
`DECODE_ATTENTION`, and `decode_attention_for` (the model's forward, switched to it for one
call). transformers' SDPA path repeats each key/value head for its query heads whenever a mask
is given (`repeat_kv`: the whole visible cache copied, every layer, every step — for SmolLM2's 9
query / 3 KV heads, three times the KV reads). With one query token per row the query heads of a
KV head can stand as that head's query positions instead: SDPA then reads each KV head once and
computes the same scores and softmax. The static decoder's step uses it (`SlotEngine`); every
other forward of the model (prefill, the trainer) keeps the model's own implementation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

DECODE_ATTENTION = "evolving_rl_decode"


def decode_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                     value: torch.Tensor, attention_mask: torch.Tensor | None,
                     dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: object) -> tuple[torch.Tensor, None]:
    """query [rows, heads, 1, dim], key/value [rows, kv_heads, window, dim], mask [rows, 1, 1,
    window] (additive); the output [rows, 1, heads, dim] as transformers' attention returns it."""
    rows, heads, new, dim = query.shape
    if new != 1:
        raise ValueError("decode_attention takes one new token per row")
    grouped = query.reshape(rows, key.shape[1], heads // key.shape[1], dim)
    out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask,
                                         scale=scaling)
    return out.reshape(rows, heads, 1, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(DECODE_ATTENTION, decode_attention)


@contextmanager
def decode_attention_for(model: torch.nn.Module) -> Iterator[None]:
    """Within: `model`'s attention layers use `decode_attention`; restored afterwards."""
    config = model.config
    saved = config._attn_implementation
    config._attn_implementation = DECODE_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = saved
