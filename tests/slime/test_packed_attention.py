"""Packed causal attention (`slime_bridge.packed_attention`): the per-sequence loop against one
dense attention with a block-diagonal causal mask, and the varlen path's argument handling for
the torch releases whose `varlen_attn` signatures differ (the kernel itself is CUDA-only: its
numbers and agreement come from benchmarks/packed_attention.py on a GPU)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from evolving_rl.slime_bridge import packed_attention

HEADS, KV_HEADS, DIM = 4, 2, 8
LENGTHS = [5, 1, 9, 3]


def _stream(total: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(total, n, DIM, generator=gen) for n in (HEADS, KV_HEADS, KV_HEADS))


def _bounds(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def _dense_reference(q, k, v, lengths, scale):
    """One attention over the whole stream, a token seeing earlier tokens of its own sequence."""
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    pos = torch.arange(doc.numel())
    allowed = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
    groups = HEADS // KV_HEADS
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(*(t.transpose(0, 1) for t in (q, k, v)),
                                         attn_mask=allowed, scale=scale)
    return out.transpose(0, 1).reshape(doc.numel(), -1)


def test_the_loop_equals_one_block_diagonal_causal_attention():
    total = sum(LENGTHS)
    q, k, v = _stream(total)
    out = packed_attention.per_sequence(q, k, v, _bounds(LENGTHS), scale=0.3)
    expected = _dense_reference(q, k, v, LENGTHS, 0.3)
    assert out.shape == (total, HEADS * DIM)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_tokens_past_the_last_boundary_attend_to_nothing():
    q, k, v = _stream(sum(LENGTHS) + 3)
    out = packed_attention.per_sequence(q, k, v, _bounds(LENGTHS), scale=0.3)
    assert torch.count_nonzero(out[sum(LENGTHS):]) == 0
    assert torch.count_nonzero(out[: sum(LENGTHS)]) > 0


def _fake_varlen(newer: bool, calls: list[dict]):
    """A CPU stand-in with one of torch's two `varlen_attn` signatures that computes the packed
    attention with the dense reference and records what it was given."""
    def run(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs):
        calls.append({"heads_k": key.shape[1], "max_q": max_q, **kwargs})
        causal = kwargs.get("is_causal") if not newer else kwargs.get("window_size") == (-1, 0)
        assert causal, "the packed attention must be causal"
        lengths = (cu_seq_q[1:] - cu_seq_q[:-1]).tolist()
        if key.shape[1] != query.shape[1]:
            assert kwargs.get("enable_gqa"), "grouped heads need enable_gqa"
        else:
            key, value = key[:, ::HEADS // KV_HEADS], value[:, ::HEADS // KV_HEADS]
        scale = kwargs.get("scale", DIM ** -0.5)
        return _dense_reference(query, key, value, lengths, scale).reshape(query.shape)

    if newer:
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None,
                        scale=None, window_size=(-1, -1), enable_gqa=False):
            return run(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale=scale,
                       window_size=window_size, enable_gqa=enable_gqa)
    else:
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False,
                        return_aux=None):
            return run(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=is_causal)
    return varlen_attn


@pytest.mark.parametrize("newer", [True, False], ids=["window_size+gqa", "is_causal"])
def test_varlen_speaks_both_signatures_and_matches_the_loop(monkeypatch, newer):
    import torch.nn.attention.varlen as varlen_module

    calls: list[dict] = []
    monkeypatch.setattr(varlen_module, "varlen_attn", _fake_varlen(newer, calls))
    q, k, v = _stream(sum(LENGTHS) + 2, seed=1)
    scale = DIM ** -0.5
    out = packed_attention.varlen(q, k, v, _bounds(LENGTHS), scale=scale)
    expected = packed_attention.per_sequence(q, k, v, _bounds(LENGTHS), scale=scale)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert calls[0]["max_q"] == max(LENGTHS)
    # the release without enable_gqa is given the key/value heads repeated to the query's count
    assert calls[0]["heads_k"] == (KV_HEADS if newer else HEADS)


def test_varlen_refuses_a_scale_the_older_signature_cannot_take(monkeypatch):
    import torch.nn.attention.varlen as varlen_module

    monkeypatch.setattr(varlen_module, "varlen_attn", _fake_varlen(False, []))
    assert "scale" not in inspect.signature(varlen_module.varlen_attn).parameters
    q, k, v = _stream(sum(LENGTHS))
    with pytest.raises(ValueError, match="no scale"):
        packed_attention.varlen(q, k, v, _bounds(LENGTHS), scale=0.3)


def test_attend_takes_varlen_only_where_it_was_measured_faster_and_can_run(monkeypatch):
    monkeypatch.setattr(packed_attention, "varlen_available", lambda: True)
    n = packed_attention.VARLEN_MIN_SEQUENCES
    assert packed_attention.varlen_pays(n, 0.0, "cuda", torch.bfloat16)
    assert not packed_attention.varlen_pays(n - 1, 0.0, "cuda", torch.bfloat16)  # 2 x 4096: 0.68x
    assert not packed_attention.varlen_pays(n, 0.1, "cuda", torch.bfloat16)  # no dropout there
    assert not packed_attention.varlen_pays(n, 0.0, "cpu", torch.bfloat16)
    assert not packed_attention.varlen_pays(n, 0.0, "cuda", torch.float32)
    monkeypatch.setattr(packed_attention, "varlen_available", lambda: False)
    assert not packed_attention.varlen_pays(n, 0.0, "cuda", torch.bfloat16)


def test_attend_on_cpu_is_the_loop():
    q, k, v = _stream(sum(LENGTHS))
    torch.testing.assert_close(
        packed_attention.attend(q, k, v, _bounds(LENGTHS), scale=0.3, max_len=max(LENGTHS)),
        packed_attention.per_sequence(q, k, v, _bounds(LENGTHS), scale=0.3))


def test_varlen_gets_a_unit_stride_in_the_head_dimension(monkeypatch):
    import torch.nn.attention.varlen as varlen_module

    fake = _fake_varlen(True, [])

    def strict(query, key, value, *args, **kwargs):
        assert all(t.stride(-1) == 1 for t in (query, key, value)), "Flash needs stride 1"
        return fake(query, key, value, *args, **kwargs)

    monkeypatch.setattr(varlen_module, "varlen_attn", strict)
    q, k, v = _stream(sum(LENGTHS))
    q_strided = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, stride(-1) != 1
    assert q_strided.stride(-1) != 1
    torch.testing.assert_close(
        packed_attention.varlen(q_strided, k, v, _bounds(LENGTHS), scale=DIM ** -0.5),
        packed_attention.per_sequence(q, k, v, _bounds(LENGTHS), scale=DIM ** -0.5))
