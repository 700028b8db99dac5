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
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F


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


def varlen_available() -> bool:
    """Whether this torch has `torch.nn.attention.varlen.varlen_attn` and a CUDA device."""
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

    params = inspect.signature(varlen_attn).parameters
    bounds = cu_seqlens.to(device=query.device, dtype=torch.int32)
    if max_len is None:
        max_len = int((bounds[1:] - bounds[:-1]).max())
    end = int(bounds[-1])
    q, k, v = query[:end], key[:end], value[:end]
    kwargs: dict[str, object] = {}
    if "scale" in params:
        kwargs["scale"] = scale
    elif abs(scale - query.shape[-1] ** -0.5) > 1e-12:
        raise ValueError("this torch's varlen_attn takes no scale; only 1/sqrt(dim) is supported")
    if "is_causal" in params:
        kwargs["is_causal"] = True
    else:
        kwargs["window_size"] = (-1, 0)
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
