"""The device side of static decoding: per-slot buffers, one decode step, its CUDA graphs.

Owns `SlotEngine` and `StepShape`. The engine holds a `SlotCache` and, per slot, the token to feed
next, whether the slot is active, its sampling parameters (temperature, top-k,
top-p), the uniform number its next draw uses and its result [token, log-prob].
`step(StepShape(rows, window, filtered))` runs the model on the first `rows` slots over the first
`window` KV columns: positions are the slot lengths, the 4D mask lets each row see its own
columns 0..length (attention by `decode_attention`), sampling (`sampling.sample_rows`; top-k /
top-p only when `filtered`) and the chosen tokens' log-probs are computed on the device, the
sampled tokens become the next feed and active slots' lengths grow by one;
nothing is copied to the host. On CUDA each shape is captured once as a CUDA graph (row buckets
1, 2, 4, ... up to the slot count; windows 128, 256, ... up to the capacity) and replayed, which
removes the per-kernel launch cost that dominates a small model's decode step; elsewhere the
step runs eagerly. On CUDA the model's RMSNorms are fused for inference (`fused_norm`). The
graphs read the model's parameters in place, so in-place optimiser updates need no re-capture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from evolving_rl.clients.policy import SamplingParams
from evolving_rl.local.engine.decode_attention import decode_attention_for
from evolving_rl.local.engine.fused_norm import use_fused_rms_norm
from evolving_rl.local.engine.kv_cache import LayerKV
from evolving_rl.local.engine.sampling import sample_rows
from evolving_rl.local.engine.slot_cache import CopyPlan, SlotCache

MIN_WINDOW = 128  # smallest KV window bucket (tokens); the capacity is a multiple of it


class StepShape(NamedTuple):
    """What one captured graph is specialised for: slots, KV columns, top-k/top-p or not."""

    rows: int
    window: int
    filtered: bool


def buckets(limit: int, smallest: int = 1) -> list[int]:
    """Powers of two from `smallest` below `limit`, then `limit`."""
    sizes, size = [], smallest
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, limit]


def bucket_for(value: int, sizes: list[int]) -> int:
    """The smallest of `sizes` (ascending) that is at least `value`."""
    return next(size for size in sizes if size >= value)


class SlotEngine:
    """Device buffers and the decode step of a static decoder (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, cache_name: str, slots: int, capacity: int,
                 graphs: bool) -> None:
        config, weight = model.config, next(model.parameters())
        self.model, self.cache_name, self.device = model, cache_name, weight.device
        capacity = -(-capacity // MIN_WINDOW) * MIN_WINDOW
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)
        self.cache = SlotCache(config.num_hidden_layers, config.num_key_value_heads, head_dim,
                               slots, capacity, weight.dtype, self.device)
        self.mask_min = torch.finfo(weight.dtype).min
        new = {"device": self.device}
        self.feed = torch.zeros(slots, dtype=torch.long, **new)
        self.active = torch.zeros(slots, dtype=torch.long, **new)
        self.temperature = torch.zeros(slots, **new)
        self.top_k = torch.zeros(slots, dtype=torch.long, **new)
        self.top_p = torch.ones(slots, **new)
        self.uniforms = torch.zeros(slots, **new)
        self.result = torch.zeros(slots, 2, dtype=torch.float64, **new)  # token, log-prob
        self.row_buckets = buckets(slots)
        self.windows = buckets(capacity, MIN_WINDOW)
        self.capture = graphs and self.device.type == "cuda"
        if self.capture:
            use_fused_rms_norm(model)
        self.graphs: dict[StepShape, torch.cuda.CUDAGraph] = {}
        self._pool: object = None

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    def admit(self, layers: LayerKV, plan: CopyPlan, tokens: torch.Tensor,
              samplings: Sequence[SamplingParams]) -> None:
        """Put prefilled rows in their slots (`plan.targets`): KV, next token, sampling."""
        self.cache.write_rows(layers, plan)
        slots = plan.targets
        self.feed.index_copy_(0, slots, tokens)
        self.active.index_fill_(0, slots, 1)
        for buffer, values in ((self.temperature, [s.temperature for s in samplings]),
                               (self.top_k, [s.top_k for s in samplings]),
                               (self.top_p, [s.top_p for s in samplings])):
            buffer.index_copy_(0, slots, torch.tensor(values, dtype=buffer.dtype).to(self.device))

    def release(self, slots: torch.Tensor) -> None:
        """Mark `slots` (a device index) free."""
        self.active.index_fill_(0, slots, 0)
        self.cache.free(slots)

    def device_index(self, slots: list[int]) -> torch.Tensor:
        """`slots` as a device tensor, copied without a host sync (pinned, non-blocking)."""
        index = torch.tensor(slots, dtype=torch.long)
        if self.device.type == "cuda":
            index = index.pin_memory()
        return index.to(self.device, non_blocking=True)

    def step(self, shape: StepShape) -> None:
        """One decode step of the first `shape.rows` slots over `shape.window` KV columns."""
        if not self.capture:
            self._forward(shape)
            return
        graph = self.graphs.get(shape)
        if graph is None:
            graph = self.graphs[shape] = self._capture(shape)
        graph.replay()

    def _forward(self, shape: StepShape) -> None:
        rows, cache = shape.rows, self.cache
        cache.window = shape.window
        lengths = cache.lengths[:rows]
        columns = torch.arange(shape.window, device=self.device)
        hidden = (columns[None, :] > lengths[:, None])[:, None, None, :]
        mask = torch.zeros(hidden.shape, dtype=cache.layers[0].store_keys.dtype,
                           device=self.device).masked_fill(hidden, self.mask_min)
        with decode_attention_for(self.model):
            out = self.model(input_ids=self.feed[:rows, None], attention_mask=mask,
                             position_ids=lengths[:, None], use_cache=True, logits_to_keep=1,
                             **{self.cache_name: cache})
        logits = out.logits[:, -1].float()
        tokens = sample_rows(logits, self.temperature[:rows], self.top_k[:rows],
                             self.top_p[:rows], self.uniforms[:rows], shape.filtered)
        chosen = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
        self.feed[:rows].copy_(tokens)
        lengths.add_(self.active[:rows])
        self.result[:rows, 0].copy_(tokens)
        self.result[:rows, 1].copy_(chosen)

    def _capture(self, shape: StepShape) -> torch.cuda.CUDAGraph:
        """Warm up on a side stream, capture, and undo the warm-up's effect on the state."""
        saved = self.cache.lengths.clone(), self.feed.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(shape)
                self.cache.lengths.copy_(saved[0])
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._forward(shape)
        self._pool = graph.pool()
        self.cache.lengths.copy_(saved[0])
        self.feed.copy_(saved[1])
        return graph
