"""Prefix reuse of KV caches across generate calls (what SGLang's radix cache does, simply).

Owns `PrefixCache`, `shared_prefixes` and `assemble_prefill`. A multi-turn episode sends, each
turn, its whole context: the previous prompt + the sampled reply + the next observation block.
Without reuse the in-process policy would re-encode the growing context every turn (quadratic in
turns, and most of the CPU time). When a row of a batch finishes, the KV tensors of the tokens it
has encoded (prompt + reply minus the last sampled token, never fed) are stored under those token
ids; a later prompt reuses the longest stored common prefix (at least `min_tokens`) and only its
suffix is encoded. Prompts admitted together that share a prefix (episodes with one system prompt
and skill card) get it encoded once first (`shared_prefixes`).

A batch mixes rows with different reused lengths: reused keys/values are left-padded to the
longest reused length C, the suffixes are left-padded to the longest suffix S, and the attention
mask [rows, C + S] marks the holes; position ids come from the mask, so every token keeps the
position it had (or would have had) in a plain left-padded batch. Entries are an LRU bounded by
`capacity`; an entry that is a prefix of a newly stored one is dropped (superseded). Only for
models whose every layer is full attention (no sliding window), since a sliding-window layer
does not keep the whole prefix.

The cache is shared by two threads: the engine thread looks up and stores, the caller clears it
after an optimiser step (`LocalPolicy.weights_changed`). A lock makes each operation whole, and
`epoch` (incremented by every clear) tags what a store was computed under: a row admitted before
the weights changed stores nothing afterwards, since its KV belongs to the old weights.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [heads, len, dim]


def full_attention_only(model: torch.nn.Module) -> bool:
    config = model.config
    types = getattr(config, "layer_types", None) or ["full_attention"]
    sliding = getattr(config, "use_sliding_window", False) and getattr(
        config, "sliding_window", None)
    return set(types) == {"full_attention"} and not sliding


def cache_layers(cache: object) -> LayerKV:
    """(keys, values) [batch, heads, len, dim] of each layer of an HF dynamic cache."""
    return [(layer.keys, layer.values) for layer in cache.layers]


@dataclass
class _Entry:
    ids: np.ndarray
    kv: LayerKV


class PrefixCache:
    """LRU of per-sequence KV tensors keyed by the token ids they encode."""

    def __init__(self, capacity: int, min_tokens: int = 16) -> None:
        self.capacity = capacity
        self.min_tokens = min_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.epoch = 0  # clears so far: the weights' version the entries were computed with
        self.hits = 0
        self.reused_tokens = 0
        self.stale_stores = 0  # stores dropped because the weights changed since their admission

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry and start a new epoch (stored KV is stale once the weights change)."""
        with self._lock:
            self._entries.clear()
            self.epoch += 1

    def _best(self, tokens: Sequence[int], limit: int) -> tuple[int | None, int]:
        """(entry key, n) of the longest stored common prefix of `tokens`, n <= `limit`."""
        query = np.asarray(tokens, dtype=np.int64)
        best_key, best_n = None, 0
        for key, entry in self._entries.items():
            common = _common_length(entry.ids, query, limit)
            if common > best_n:
                best_key, best_n = key, common
        return best_key, best_n

    def stored_length(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` have stored KV (no side effects)."""
        with self._lock:
            return self._best(tokens, len(tokens))[1]

    def lookup(self, prompt: Sequence[int]) -> tuple[int, LayerKV | None]:
        """(n, kv of the first n tokens) of the longest stored common prefix; n < len(prompt)."""
        with self._lock:
            best_key, best_n = self._best(prompt, len(prompt) - 1)
            if best_key is None or best_n < self.min_tokens:
                return 0, None
            self._entries.move_to_end(best_key)
            self.hits += 1
            self.reused_tokens += best_n
            kv = self._entries[best_key].kv
        return best_n, [(k[:, :best_n], v[:, :best_n]) for k, v in kv]

    def store(self, ids: Sequence[int], kv: LayerKV, epoch: int) -> None:
        """Keep `kv` of `ids`, computed with the weights of `epoch` (dropped if not current)."""
        if self.capacity <= 0 or len(ids) < self.min_tokens:
            return
        new = np.asarray(ids, dtype=np.int64)
        with self._lock:
            if epoch != self.epoch:
                self.stale_stores += 1
                return
            for key in [k for k, e in self._entries.items()
                        if len(e.ids) <= len(new) and np.array_equal(e.ids, new[:len(e.ids)])]:
                del self._entries[key]
            self._entries[self._next] = _Entry(new, kv)
            self._next += 1
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


def _common_length(a: np.ndarray, b: np.ndarray, limit: int) -> int:
    """Length of the common prefix of `a` and `b`, at most `limit`."""
    n = min(len(a), len(b), limit)
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def shared_prefixes(prompts: Sequence[Sequence[int]], min_tokens: int) -> list[list[int]]:
    """The prefixes (>= `min_tokens`) that prompts of one batch share with another prompt of it.

    Each prompt contributes its longest common prefix with any other prompt (never the whole of
    either); a prefix that is itself a prefix of a longer one is left out, since a lookup reuses
    any common prefix of a stored sequence. Encoding these once lets every row reuse them.
    """
    arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
    found: set[tuple[int, ...]] = set()
    for i, a in enumerate(arrays):
        best = max((_common_length(a, b, min(len(a), len(b)) - 1)
                    for j, b in enumerate(arrays) if j != i), default=0)
        if best >= min_tokens:
            found.add(tuple(a[:best].tolist()))
    return [list(p) for p in sorted(found) if not any(
        len(other) > len(p) and other[:len(p)] == p for other in found)]


@dataclass
class Prefill:
    """Inputs of the first forward of a batch (see the module docstring)."""

    input_ids: torch.Tensor  # [rows, S]
    attention_mask: torch.Tensor  # [rows, C + S]
    position_ids: torch.Tensor  # [rows, S]
    past: LayerKV | None  # per layer [rows, heads, C, dim], None when nothing is reused


def assemble_prefill(prompts: Sequence[Sequence[int]], reused: Sequence[tuple[int, LayerKV | None]],
                     pad_id: int, device: torch.device | str) -> Prefill:
    """Left-pad reused KV to C and suffixes to S; mask and positions for the mixed batch."""
    lengths = [n for n, _ in reused]
    width_c = max(lengths)
    width_s = max(len(p) - n for p, n in zip(prompts, lengths, strict=True))
    ids = torch.full((len(prompts), width_s), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width_c + width_s), dtype=torch.long)
    for row, (prompt, n) in enumerate(zip(prompts, lengths, strict=True)):
        suffix = list(prompt[n:])
        if suffix:
            ids[row, width_s - len(suffix):] = torch.tensor(suffix, dtype=torch.long)
            mask[row, width_c + width_s - len(suffix):] = 1
        mask[row, width_c - n:width_c] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)[:, width_c:]
    past = _pad_past(reused, width_c, device) if width_c else None
    return Prefill(ids.to(device), mask.to(device), positions.to(device), past)


def _pad_past(reused: Sequence[tuple[int, LayerKV | None]], width: int,
              device: torch.device | str) -> LayerKV:
    template = next(kv for _, kv in reused if kv is not None)
    past: LayerKV = []
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((len(reused), k0.shape[0], width, k0.shape[-1]))
        values = v0.new_zeros((len(reused), v0.shape[0], width, v0.shape[-1]))
        for row, (n, kv) in enumerate(reused):
            if kv is not None:
                keys[row, :, width - n:] = kv[layer][0]
                values[row, :, width - n:] = kv[layer][1]
        past.append((keys.to(device), values.to(device)))
    return past
