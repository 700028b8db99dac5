"""Causal attention over a packed THD stream ([t, heads, dim], one causal block per sequence of
`cu_seqlens`), the core of `megatron_spec.PackedSdpaAttention`, with no Megatron import so that
benchmarks/packed_attention.py and CPU tests call the same functions the spec does.

Two ways to compute it:
- `per_sequence`: PyTorch's scaled_dot_product_attention on one sequence at a time (a Python loop
  and one host sync for the boundaries). Any device and dtype, dropout included.
- `varlen`: one call of `torch.nn.attention.varlen.varlen_attn` (Flash Attention's variable-length
  kernel) over the whole stream. CUDA, half precision, no dropout; its keyword for causality
  moved between torch releases (`is_causal` in 2.10, `window_size=(-1, 0)` later), and a release
  without `enable_gqa` gets its grouped key/value heads repeated.

`attend` picks between them by what was measured (benchmarks/packed_attention.py, one H200,
Qwen2.5-7B's attention shape, 8192 tokens, forward + backward a layer; docs/results/
2026-12-05-packed-attention-7b.md): one varlen call is 5.6x faster than the loop over 32
sequences of 256 tokens, 1.9x over 8 of 1024 and 1.4x over six of mixed lengths, while the loop
is 1.5x faster over 2 of 4096. So `varlen` from VARLEN_MIN_SEQUENCES sequences on, where it can
run; `per_sequence` otherwise.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Final

import torch
import torch.nn.functional as F

#: From this many sequences in a stream on, one varlen call beats the loop (measured loop /
#: varlen: 0.68x at 2 sequences, 1.4x at 6, 1.9x at 8).
VARLEN_MIN_SEQUENCES: Final = 4


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
           *, scale: float, dropout_p: float = 0.0, max_len: int | None = None) -> torch.Tensor:
    """The packed stream's causal attention, [t, heads, dim] -> [t, heads * dim], by the faster
    of the two ways that can compute it (the module docstring says which when)."""
    if varlen_pays(cu_seqlens.numel() - 1, dropout_p, query.device.type, query.dtype):
        return varlen(query, key, value, cu_seqlens, scale=scale, max_len=max_len)
    return per_sequence(query, key, value, cu_seqlens, scale=scale, dropout_p=dropout_p)


def varlen_pays(n_sequences: int, dropout_p: float, device_type: str, dtype: torch.dtype) -> bool:
    """Whether `attend` takes the varlen call: it can run (CUDA, half precision, no dropout,
    a torch that has it) and the stream has enough sequences for it to be the faster."""
    return (n_sequences >= VARLEN_MIN_SEQUENCES and dropout_p == 0.0 and device_type == "cuda"
            and dtype in (torch.bfloat16, torch.float16) and varlen_available())


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                dropout_p: float = 0.0) -> torch.Tensor:
    """Causal SDPA on [b, heads, s, dim] tensors; grouped-query heads when k has fewer."""
    return F.scaled_dot_product_attention(
        q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale,
        enable_gqa=q.shape[1] != k.shape[1])


def per_sequence(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 cu_seqlens: torch.Tensor, *, scale: float, dropout_p: float = 0.0) -> torch.Tensor:
    """[t, heads, dim] stream -> [t, heads * dim]; tokens past the last boundary get zeros."""
    bounds = cu_seqlens.tolist()
    outs = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        # [t, h, d] -> [1, h, t, d]
        q, k, v = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (query, key, value))
        outs.append(sdpa_causal(q, k, v, scale=scale, dropout_p=dropout_p)[0].transpose(0, 1))
    tail = query.shape[0] - bounds[-1]  # tokens past the last boundary attend to nothing
    if tail:
        outs.append(query.new_zeros(tail, *query.shape[1:]))
    return torch.cat(outs).reshape(query.shape[0], -1)


@functools.cache
def varlen_available() -> bool:
    """Whether this torch has `torch.nn.attention.varlen.varlen_attn` and a CUDA device (asked
    once: `attend` runs once a layer)."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


def varlen(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           cu_seqlens: torch.Tensor, *, scale: float, max_len: int | None = None) -> torch.Tensor:
    """The same as `per_sequence` (no dropout) in one Flash Attention variable-length call;
    `max_len` (the longest sequence; Megatron's `PackedSeqParams.max_seqlen_q`) spares a host
    sync when given."""
    from torch.nn.attention.varlen import varlen_attn

    bounds = cu_seqlens.to(device=query.device, dtype=torch.int32)
    max_len = int((bounds[1:] - bounds[:-1]).max()) if max_len is None else int(max_len)
    end = int(bounds[-1])
    # Flash Attention reads rows with a unit stride in the head dimension, nothing else
    q, k, v = (t[:end] if t.stride(-1) == 1 else t[:end].contiguous() for t in (query, key, value))
    params = _keywords(varlen_attn)
    kwargs = _causal_kwargs(params, scale, query.shape[-1])
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = varlen_attn(q, k, v, bounds, bounds, max_len, max_len, **kwargs)
    out = out.reshape(end, -1)
    tail = query.shape[0] - end
    if tail:
        out = torch.cat([out, out.new_zeros(tail, out.shape[1])])
    return out


@functools.cache
def _keywords(fn: Callable) -> frozenset[str]:
    """The parameter names of `fn`, read once per function (`varlen` runs once a layer)."""
    return frozenset(inspect.signature(fn).parameters)


def _causal_kwargs(params: frozenset[str], scale: float, dim: int) -> dict[str, object]:
    """`varlen_attn`'s keywords for a causal mask and `scale` in this torch's signature."""
    kwargs: dict[str, object] = {"is_causal": True} if "is_causal" in params else {
        "window_size": (-1, 0)}
    if "scale" in params:
        kwargs["scale"] = scale
    elif abs(scale - dim ** -0.5) > 1e-12:
        raise ValueError("this torch's varlen_attn takes no scale; only 1/sqrt(dim) is supported")
    return kwargs
