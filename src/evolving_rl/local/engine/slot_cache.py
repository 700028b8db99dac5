"""A static (pre-allocated) KV cache with one fixed slot per batch row, for captured decode steps.

Owns `SlotCache` and its layer. Each layer holds keys and values [slots, heads, capacity, dim]
allocated once; slot s holds its row's tokens at columns 0..lengths[s]-1, contiguous (no padding
holes), and `lengths` [slots] lives on the device. A decode step over the first `rows` slots
writes each row's new key/value at its own column lengths[s] (one `scatter_`, no host value
involved) and hands attention the first `window` columns, masked per row by the caller. Nothing
is allocated or resized after construction, so the step can be captured as a CUDA graph and
replayed: the tensors' addresses never move. Rows join by `write_rows` (their prefill KV copied
into free slots as a `CopyPlan` maps it) and leave by `rows_kv` (their KV copied out, for the
prefix cache).

It honours transformers' layered cache API (`Cache.update(keys, values, layer_idx, ...)`) for
attention layers that see one new token per row; prefill runs on a `GrowingCache` instead. The
layer's capacity answers both names transformers' abstract layer has given it: `get_max_length`
(the project's venv) and `get_max_cache_shape` (5.12.1, SGLang 0.5.15.post1's pin on the slime
image), so the engine runs beside either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from evolving_rl.local.engine.kv_cache import LayerKV


@dataclass(frozen=True)
class CopyPlan:
    """Where prefill KV goes: token (rows[i], columns[i]) of the prefill batch to column
    slot_columns[i] of slot slots[i]; slot targets[j] then holds lengths[j] tokens (all on the
    cache's device)."""

    rows: torch.Tensor
    columns: torch.Tensor
    slots: torch.Tensor
    slot_columns: torch.Tensor
    targets: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def build(cls, mask: torch.Tensor, rows: Sequence[int], slots: Sequence[int],
              device: torch.device) -> CopyPlan:
        """Row rows[j] of the prefill (its tokens: the columns where the host `mask` is set)
        goes to slot slots[j], from column 0."""
        parts: list[list[torch.Tensor]] = [[], [], [], []]
        for row, slot in zip(rows, slots, strict=True):
            columns = mask[row].nonzero()[:, 0]
            for part, values in zip(parts, (torch.full_like(columns, row), columns,
                                            torch.full_like(columns, slot),
                                            torch.arange(len(columns))), strict=True):
                part.append(values)
        lengths = [len(columns) for columns in parts[1]]
        return cls(*(torch.cat(part).to(device) for part in parts),
                   torch.tensor(list(slots)).to(device), torch.tensor(lengths).to(device))


class SlotLayer(CacheLayerMixin):
    """One layer's keys/values [slots, heads, capacity, dim]; written at per-row columns."""

    is_compileable = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, owner: SlotCache) -> None:
        super().__init__()
        self.store_keys, self.store_values, self.owner = keys, values, owner
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a SlotLayer is allocated up front")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        rows, heads, new, dim = key_states.shape
        if new != 1:
            raise ValueError("a SlotCache takes one new token per row (prefill uses GrowingCache)")
        column = self.owner.lengths[:rows].view(rows, 1, 1, 1).expand(rows, heads, 1, dim)
        keys, values = self.store_keys[:rows], self.store_values[:rows]
        keys.scatter_(2, column, key_states)
        values.scatter_(2, column, value_states)
        window = self.owner.window
        self.keys, self.values = keys[:, :, :window], values[:, :, :window]
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.window, 0

    def get_seq_length(self) -> int:
        return 0  # rows differ; callers pass positions and a 4D mask

    def get_max_length(self) -> int:
        """The slot capacity: the most tokens a row can hold (the venv's transformers 5.25)."""
        return self.store_keys.shape[-2]

    get_max_cache_shape = get_max_length  # the same, by transformers 5.12.1's abstract name


class SlotCache(Cache):
    """Per-slot static KV of every layer plus the device tensor of slot lengths."""

    def __init__(self, layers: int, heads: int, head_dim: int, slots: int, capacity: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.lengths = torch.zeros(slots, dtype=torch.long, device=device)
        self.window = capacity
        shape = (slots, heads, capacity, head_dim)
        super().__init__(layers=[
            SlotLayer(torch.zeros(shape, dtype=dtype, device=device),
                      torch.zeros(shape, dtype=dtype, device=device), self)
            for _ in range(layers)])

    @property
    def capacity(self) -> int:
        return self.layers[0].store_keys.shape[-2]

    def write_rows(self, layers: LayerKV, plan: CopyPlan) -> None:
        """Copy prefill KV (per layer [rows, heads, len, dim]) into slots as `plan` maps it: two
        indexed copies per layer, whatever the number of rows."""
        for layer, (keys, values) in zip(self.layers, layers, strict=True):
            layer.store_keys[plan.slots, :, plan.slot_columns] = keys[plan.rows, :, plan.columns]
            layer.store_values[plan.slots, :, plan.slot_columns] = (
                values[plan.rows, :, plan.columns])
        self.lengths.index_copy_(0, plan.targets, plan.lengths)

    def rows_kv(self, slots: torch.Tensor, lengths: Sequence[int]) -> list[LayerKV]:
        """Copies of the first lengths[j] tokens' KV of slot slots[j] (the slots will be reused):
        one gather per layer for all rows; each row's tensors are views into it."""
        width = max(lengths)
        gathered = [(layer.store_keys[:, :, :width].index_select(0, slots),
                     layer.store_values[:, :, :width].index_select(0, slots))
                    for layer in self.layers]
        return [[(keys[j, :, :n], values[j, :, :n]) for keys, values in gathered]
                for j, n in enumerate(lengths)]

    def free(self, slots: torch.Tensor) -> None:
        """Reset the lengths of `slots` (their stale KV is overwritten by the next rows)."""
        self.lengths.index_fill_(0, slots, 0)
