"""A KV cache for decoding that grows in chunks instead of concatenating every step.

Owns `GrowingCache` and its layer. transformers' `DynamicCache` appends each decode step's keys
and values with `torch.cat`, which copies the whole cache of every layer every step (what that
cost: docs/design.md §6.2). Here each layer keeps a buffer with spare room at the end (a multiple
of `CHUNK` tokens), writes new keys/values in place and hands attention a view of the filled part;
the buffer is reallocated only when it is full. Selecting batch rows selects from the buffer, so
the spare room survives rows leaving the batch.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

CHUNK = 128  # tokens of spare room added per reallocation


class GrowingLayer(DynamicLayer):
    """One layer's keys/values [rows, heads, len, dim] inside a buffer with spare room."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._keys_buffer: torch.Tensor | None = None
        self._values_buffer: torch.Tensor | None = None
        self._length = 0

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Make room for `key_states`' tokens, copying the filled part into a larger buffer."""
        needed = self._length + key_states.shape[-2]
        if self._keys_buffer is not None and needed <= self._keys_buffer.shape[-2]:
            return
        capacity = (needed // CHUNK + 1) * CHUNK
        keys = key_states.new_empty((*key_states.shape[:2], capacity, key_states.shape[-1]))
        values = value_states.new_empty((*value_states.shape[:2], capacity, value_states.shape[-1]))
        if self._length:
            keys[..., :self._length, :] = self.keys
            values[..., :self._length, :] = self.values
        self._keys_buffer, self._values_buffer = keys, values

    def _expose(self) -> None:
        self.keys = self._keys_buffer[..., :self._length, :]
        self.values = self._values_buffer[..., :self._length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._reserve(key_states, value_states)
        end = self._length + key_states.shape[-2]
        self._keys_buffer[..., self._length:end, :] = key_states
        self._values_buffer[..., self._length:end, :] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._keys_buffer = self._keys_buffer[indices]
            self._values_buffer = self._values_buffer[indices]
            self._expose()

    def reset(self) -> None:
        self._keys_buffer = self._values_buffer = None
        self._length = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if self.is_initialized:
            self._length = self.keys.shape[-2]

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("GrowingLayer is for sampling, not beam search")


class GrowingCache(DynamicCache):
    """A `DynamicCache` whose layers are `GrowingLayer`s, created as the model first writes."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)

    @classmethod
    def from_layers(cls, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> GrowingCache:
        """A cache already holding `layers` (per layer: keys, values [rows, heads, len, dim])."""
        cache = cls()
        for index, (keys, values) in enumerate(layers):
            cache.update(keys, values, index)
        return cache
