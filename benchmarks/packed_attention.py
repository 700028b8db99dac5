"""Packed causal attention at 7B shape: megatron_spec's per-sequence loop against one varlen call.

    PYTHONPATH=src python -m benchmarks.packed_attention [--device cuda] [--tokens 8192]
        [--repeats 20] [--tiny]

The TE-free slime spec (`slime_bridge/megatron_spec.py`) attends a packed THD micro-batch one
sequence at a time (`packed_attention.per_sequence`: a Python loop, a host sync per layer). This
times it, forward + backward of one layer in bfloat16 at Qwen2.5-7B's attention shape (28 query
heads, 4 key/value heads, head dim 128), against the same stream in one call:
- `varlen`: `packed_attention.varlen` (torch's Flash Attention variable-length kernel), CUDA only;
- `flex`: torch's flex_attention, compiled, with a document-causal block mask (the mask's build,
  once per micro-batch in training, is timed apart), CUDA only;
and, for scale, the layer's dense projections (QKV, output, gate/up, down: the rest of a layer's
work) forward + backward on the same tokens. Streams of `--tokens` tokens: 32 x 256, 8 x 1024,
2 x 4096 and a mix of ALFWorld-like lengths. Each alternative's output and query gradient are
compared with the loop's (max |difference|, bf16 tolerance). Medians of `--repeats` timed runs
after 3 warm-ups; prints a table and the ratio loop / varlen per stream. `--tiny`: CPU sizes,
the loop and the dense proxy only (the alternatives need CUDA).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable

import torch

from benchmarks.cli import parse_with_tiny
from evolving_rl.slime_bridge import packed_attention

logger = logging.getLogger(__name__)

#: Qwen2.5-7B: hidden 3584, 28 query heads, 4 key/value heads, head dim 128, MLP 18944.
SHAPE_7B = {"hidden": 3584, "heads": 28, "kv_heads": 4, "head_dim": 128, "ffn": 18944}
TINY = {"device": "cpu", "tokens": 256, "repeats": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
        "head_dim": 16, "ffn": 128}
WARMUP = 3


def streams(tokens: int) -> dict[str, list[int]]:
    """Sequence lengths of each packed stream, summing to `tokens`."""
    mixed = [3100, 1800, 900, 2400, 600, 1400]  # ALFWorld-like sample lengths, scaled to fit
    scale = tokens / sum(mixed)
    mixed = [max(1, int(n * scale)) for n in mixed]
    mixed[-1] += tokens - sum(mixed)
    out = {f"{tokens // n} x {n}": [n] * (tokens // n) for n in (256, 1024, 4096) if n <= tokens}
    out["mixed"] = mixed
    return out


def cu_seqlens(lengths: list[int], device: str) -> torch.Tensor:
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return torch.tensor(bounds, dtype=torch.int32, device=device)


def timed(fn: Callable[[], None], device: str, repeats: int) -> float:
    """Median wall ms of fn() after WARMUP untimed calls (synchronised on CUDA)."""
    for _ in range(WARMUP):
        fn()
    walls = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        walls.append((time.perf_counter() - started) * 1000)
    return statistics.median(walls)


def fwd_bwd(attend: Callable, q, k, v, grad) -> Callable[[], torch.Tensor]:
    """A closure running attend forward + backward; returns the output (q.grad is left set)."""
    def run() -> torch.Tensor:
        for t in (q, k, v):
            t.grad = None
        out = attend(q, k, v)
        out.backward(grad)
        return out
    return run


def flex_attend(lengths: list[int], scale: float, device: str):
    """(build the block mask, attend with it) for a document-causal mask over `lengths`."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    doc = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                  torch.tensor(lengths, device=device))
    total = int(doc.numel())
    compiled = torch.compile(flex_attention, dynamic=False)

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def build():
        return create_block_mask(mask_mod, None, None, total, total, device=device)

    block = build()

    def attend(q, k, v):
        out = compiled(*(t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)), block_mask=block,
                       scale=scale, enable_gqa=q.shape[1] != k.shape[1])
        return out[0].transpose(0, 1).reshape(total, -1)

    return build, attend


def dense_layer_ms(args, tokens: int, dtype: torch.dtype, repeats: int) -> float:
    """Forward + backward ms of one layer's projections at `tokens` tokens: the layer's rest."""
    h, d = args.hidden, args.head_dim
    dims = [(h, (args.heads + 2 * args.kv_heads) * d), (args.heads * d, h),
            (h, 2 * args.ffn), (args.ffn, h)]
    layers = [torch.nn.Linear(i, o, bias=False, device=args.device, dtype=dtype) for i, o in dims]
    inputs = [torch.randn(tokens, i, device=args.device, dtype=dtype, requires_grad=True)
              for i, _ in dims]

    def run():
        for layer, x in zip(layers, inputs, strict=True):
            layer(x).sum().backward()
    return timed(run, args.device, repeats)


def measure_stream(args, name: str, lengths: list[int], dtype: torch.dtype) -> dict[str, object]:
    tokens, scale = sum(lengths), args.head_dim ** -0.5
    gen = torch.Generator(device=args.device).manual_seed(0)
    q, k, v = (torch.randn(tokens, n, args.head_dim, device=args.device, dtype=dtype,
                           generator=gen).requires_grad_()
               for n in (args.heads, args.kv_heads, args.kv_heads))
    grad = torch.randn(tokens, args.heads * args.head_dim, device=args.device, dtype=dtype,
                       generator=gen)
    bounds = cu_seqlens(lengths, args.device)
    loop = fwd_bwd(lambda a, b, c: packed_attention.per_sequence(a, b, c, bounds, scale=scale),
                   q, k, v, grad)
    row: dict[str, object] = {"stream": name, "loop": timed(loop, args.device, args.repeats)}
    ref_out, ref_grad = loop().detach(), q.grad.detach().clone()
    alternatives = {}
    if packed_attention.varlen_available():
        alternatives["varlen"] = lambda a, b, c: packed_attention.varlen(
            a, b, c, bounds, scale=scale, max_len=max(lengths))
    if args.device == "cuda":
        try:
            build, alternatives["flex"] = flex_attend(lengths, scale, args.device)
            row["flex_mask"] = timed(build, args.device, args.repeats)
        except (RuntimeError, ValueError, TypeError, ImportError) as err:  # reported, not fatal
            row["flex_error"] = f"{type(err).__name__}: {err}"[:200]
    for alt, attend in alternatives.items():
        try:
            run = fwd_bwd(attend, q, k, v, grad)
            row[alt] = timed(run, args.device, args.repeats)
            out = run().detach()
            row[f"{alt}_diff"] = max(float((out - ref_out).abs().max()),
                                     float((q.grad - ref_grad).abs().max()))
        except (RuntimeError, ValueError, TypeError) as err:  # reported: the rest goes on
            row[f"{alt}_error"] = f"{type(err).__name__}: {err}"[:200]
    row["dense"] = dense_layer_ms(args, tokens, dtype, args.repeats)
    return row


def report(rows: list[dict[str, object]], args) -> None:
    def cell(row, key):
        value = row.get(key)
        return f"{value:8.2f}" if isinstance(value, float) else f"{'-':>8s}"
    print(f"packed attention, fwd+bwd ms per layer ({args.device}, heads {args.heads}/"
          f"{args.kv_heads}, head dim {args.head_dim}, {args.tokens} tokens, medians of "
          f"{args.repeats}):")
    print(f"{'stream':>12s} {'loop':>8s} {'varlen':>8s} {'flex':>8s} {'mask':>8s} {'dense':>8s}"
          "  loop/varlen  loop/flex  max|diff| varlen, flex")
    for row in rows:
        ratios = [f"{row['loop'] / row[alt]:10.2f}x" if isinstance(row.get(alt), float)
                  else f"{'-':>11s}" for alt in ("varlen", "flex")]
        diffs = ", ".join(f"{row[k]:.3g}" if k in row else "-" for k in ("varlen_diff",
                                                                          "flex_diff"))
        print(f"{row['stream']:>12s} {cell(row, 'loop')} {cell(row, 'varlen')} "
              f"{cell(row, 'flex')} {cell(row, 'flex_mask')} {cell(row, 'dense')}  "
              f"{ratios[0]} {ratios[1]}  {diffs}")
        for key in ("varlen_error", "flex_error"):
            if key in row:
                print(f"{'':>12s} {key}: {row[key]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=20)
    for name, value in SHAPE_7B.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=value)
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.WARNING)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    rows = [measure_stream(args, name, lengths, dtype)
            for name, lengths in streams(args.tokens).items()]
    report(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
