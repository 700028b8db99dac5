"""Batched decoding with rows that join and leave at any step (continuous batching).

Owns `Decoder` (the running batch: KV cache, attention mask, positions, the next token of every row)
and `DecodeStats`. The KV cache is a `GrowingCache` (written in place, not concatenated each step).
`admit` encodes new prompts — reusing stored KV prefixes (`kv_cache`) — samples their first token
and merges them into the running batch, left-padding whichever side is shorter; `step` feeds every
row's last token, samples the next and retires the rows that finished: an end-of-sequence id, one of
the row's `stop` strings (checked on the decoded generation; the ids that completed it are kept,
like SGLang's `no_stop_trim`), or its `max_new_tokens`. A retired row's KV is stored for later
prompts that extend it and its `Generation` is handed to the `done` callback at once, so an episode
can step its environment while the other rows keep decoding. Position ids always come from the
attention mask, so padding never shifts a token's position.

Log-probs are those of the raw model (log-softmax of the logits at temperature 1, before top-k /
top-p), the old log-probs PPO needs and what the trainer recomputes; sampling itself
(`sampling.sample_tokens`) uses the temperature-scaled, filtered distribution (temperature 0:
greedy).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from evolving_rl.clients.policy import FinishReason, Generation, SamplingParams
from evolving_rl.local.engine.growing_cache import GrowingCache
from evolving_rl.local.engine.kv_cache import (
    Prefill,
    PrefixCache,
    assemble_prefill,
    cache_layers,
    shared_prefixes,
)
from evolving_rl.local.engine.sampling import sample_tokens

STOP_MARGIN = 8  # tokens decoded beyond the longest stop string's length (see _stop_completed)
# Prefill attention backends: not cuDNN's, whose per-shape plan build cost ~1.4 ms per layer call
# on an H200 (prefill shapes change with every admission); CPU runs are unaffected.
PREFILL_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass
class DecodeStats:
    """Prefill calls (admissions), requests, decode steps, rows summed over steps, new tokens,
    seconds in admissions and decode steps (busy) and in admissions alone, tokens of prefixes
    encoded once for several rows of an admission."""

    admissions: int = 0
    requests: int = 0
    steps: int = 0
    step_rows: int = 0
    tokens: int = 0
    busy_s: float = 0.0
    admit_s: float = 0.0
    shared_prefix_tokens: int = 0


@dataclass
class Row:
    """One request inside the running batch."""

    key: Any  # the caller's handle, passed back to `done`
    prompt: list[int]
    sampling: SamplingParams
    ids: list[int]
    log_probs: list[float]
    slot: int = -1  # its slot in a static decoder's KV cache
    epoch: int = 0  # the prefix cache's epoch at admission: the weights its KV is computed with


Done = Callable[[Any, Generation], None]


class Decoder:
    """The running batch of one model (see the module docstring); not thread-safe."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, eos_ids: frozenset[int],
                 generator: torch.Generator, prefixes: PrefixCache | None, cache_name: str,
                 done: Done) -> None:
        self.model, self.tokenizer, self.eos_ids = model, tokenizer, eos_ids
        self.generator, self.prefixes, self.cache_name, self.done = (
            generator, prefixes, cache_name, done)
        self.device = next(model.parameters()).device
        self.pad_id = int(tokenizer.pad_token_id)
        self.stats = DecodeStats()
        self.rows: list[Row] = []
        self.cache: Any = None
        self.mask = self.positions = self.tokens = None  # [rows, T], [rows, 1], [rows]

    def __len__(self) -> int:
        return len(self.rows)

    def _finish_reason(self, row: Row, token: int) -> FinishReason | None:
        if token in self.eos_ids:
            return FinishReason.STOP
        if row.sampling.stop and self._stop_completed(row):
            return FinishReason.STOP
        return FinishReason.LENGTH if len(row.ids) >= row.sampling.max_new_tokens else None

    def _stop_completed(self, row: Row) -> bool:
        """Whether the decoded generation holds one of the row's stop strings. Any earlier
        occurrence would have ended the row, so only the tail that the last token completes is
        decoded: as many tokens as the longest stop string has characters, plus a margin (the
        whole generation when the tail decodes to too few characters)."""
        longest = max(len(stop) for stop in row.sampling.stop)
        tail = row.ids[-(longest + STOP_MARGIN):]
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        if len(tail) < len(row.ids) and len(text) <= longest:
            text = self.tokenizer.decode(row.ids, skip_special_tokens=False)
        return any(stop in text for stop in row.sampling.stop)

    def _record(self, row: Row, token: int, log_prob: float) -> bool:
        """Append a sampled token to `row`; hand its `Generation` to `done` if it finished.
        Whether the row keeps running."""
        row.ids.append(token)
        row.log_probs.append(log_prob)
        reason = self._finish_reason(row, token)
        if reason is not None:
            self.stats.tokens += len(row.ids)
            self.done(row.key, Generation(tuple(row.ids), tuple(row.log_probs), reason))
        return reason is None

    def _sample(self, logits: torch.Tensor, rows: Sequence[Row]) -> tuple[torch.Tensor, list[int]]:
        """Sample one token per row, record it; (tokens, indices of rows still running)."""
        logits = logits.float()
        tokens = sample_tokens(logits, [r.sampling for r in rows], self.generator)
        chosen = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
        ids, log_probs = torch.stack((tokens.double(), chosen.double())).tolist()  # one copy
        return tokens, [k for k, row in enumerate(rows)
                        if self._record(row, int(ids[k]), log_probs[k])]

    def _remember(self, row: Row, layers: list[tuple[torch.Tensor, torch.Tensor]],
                  mask: torch.Tensor, k: int) -> None:
        """Store the KV of batch row `k` (prompt + ids minus the last, unfed token)."""
        if self.prefixes is None:
            return
        keep = mask[k].bool()
        kv = [(keys[k][:, keep], values[k][:, keep]) for keys, values in layers]
        ids = row.prompt + row.ids[:-1]
        if kv and kv[0][0].shape[1] == len(ids):
            self.prefixes.store(ids, kv, row.epoch)

    def _prefill(self, prompts: Sequence[list[int]]) -> tuple[Any, Prefill, GrowingCache]:
        """One forward over `prompts` (stored prefixes reused): output, inputs, KV cache."""
        reused = [self.prefixes.lookup(p) if self.prefixes else (0, None) for p in prompts]
        inputs = assemble_prefill(prompts, reused, self.pad_id, self.device)
        cache = GrowingCache.from_layers(inputs.past or [])
        with sdpa_kernel(PREFILL_ATTENTION):
            out = self.model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                             position_ids=inputs.position_ids, use_cache=True, logits_to_keep=1,
                             **{self.cache_name: cache})
        return out, inputs, cache

    def _warm_shared_prefixes(self, prompts: Sequence[list[int]], epoch: int) -> None:
        """Encode once, and store, the prefixes that several of `prompts` share."""
        if self.prefixes is None or len(prompts) < 2:
            return
        shared = [p for p in shared_prefixes(prompts, self.prefixes.min_tokens)
                  if self.prefixes.stored_length(p) < len(p)]
        if not shared:
            return
        _, inputs, cache = self._prefill(shared)
        layers = cache_layers(cache)
        for k, prefix in enumerate(shared):
            keep = inputs.attention_mask[k].bool()
            self.prefixes.store(prefix, [(keys[k][:, keep], values[k][:, keep])
                                         for keys, values in layers], epoch)
        self.stats.shared_prefix_tokens += sum(len(p) for p in shared)

    @torch.inference_mode()
    def admit(self, requests: Sequence[tuple[Any, list[int], SamplingParams]]) -> None:
        """Encode `requests` (key, prompt ids, sampling), sample their first token, join them."""
        started = time.perf_counter()
        ensure_eval(self.model)
        prompts = [prompt for _, prompt, _ in requests]
        epoch = self.prefixes.epoch if self.prefixes is not None else 0  # before any lookup
        self._warm_shared_prefixes(prompts, epoch)
        out, inputs, cache = self._prefill(prompts)
        rows = [Row(key, list(prompt), sampling, [], [], epoch=epoch)
                for key, prompt, sampling in requests]
        tokens, keep = self._sample(out.logits[:, -1, :], rows)
        self._retire(rows, keep, cache_layers(cache), inputs.attention_mask)
        if keep:
            index = torch.tensor(keep, device=self.device)
            if len(keep) < len(rows):
                cache.batch_select_indices(index)
            self._merge([rows[k] for k in keep], cache, inputs.attention_mask[index],
                        inputs.position_ids[index, -1:], tokens[index])
        self.stats.admissions += 1
        self.stats.requests += len(requests)
        self.stats.busy_s += time.perf_counter() - started
        self.stats.admit_s += time.perf_counter() - started

    def _retire(self, rows: Sequence[Row], keep: Sequence[int],
                layers: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor) -> None:
        kept = set(keep)
        for k, row in enumerate(rows):
            if k not in kept:
                self._remember(row, layers, mask, k)

    def _merge(self, rows: list[Row], cache: GrowingCache, mask: torch.Tensor,
               positions: torch.Tensor, tokens: torch.Tensor) -> None:
        """Join new rows (and their cache) to the running batch, left-padding the shorter
        side's KV and mask; an idle decoder adopts the new cache as it is."""
        if not self.rows:
            self.cache = cache
            self.rows, self.mask, self.positions, self.tokens = rows, mask, positions, tokens
            return
        width = max(self.mask.shape[1], mask.shape[1])
        self.cache = GrowingCache.from_layers([
            (torch.cat([_left_pad(k_old, width), _left_pad(k_new, width)]),
             torch.cat([_left_pad(v_old, width), _left_pad(v_new, width)]))
            for (k_old, v_old), (k_new, v_new) in zip(cache_layers(self.cache),
                                                      cache_layers(cache), strict=True)])
        self.mask = torch.cat([_left_pad(self.mask, width), _left_pad(mask, width)])
        self.positions = torch.cat([self.positions, positions])
        self.tokens = torch.cat([self.tokens, tokens])
        self.rows = self.rows + rows

    @torch.inference_mode()
    def step(self) -> None:
        """Feed every row its last token, sample the next, retire finished rows."""
        started = time.perf_counter()
        ensure_eval(self.model)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        self.positions = self.positions + 1
        out = self.model(input_ids=self.tokens[:, None], attention_mask=self.mask,
                         position_ids=self.positions, use_cache=True,
                         **{self.cache_name: self.cache})
        self.cache = getattr(out, self.cache_name)
        self.stats.steps += 1
        self.stats.step_rows += len(self.rows)
        tokens, keep = self._sample(out.logits[:, -1, :], self.rows)
        self._retire(self.rows, keep, cache_layers(self.cache), self.mask)
        if len(keep) < len(self.rows):
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self.cache.batch_select_indices(index)
            self.mask, self.positions = self.mask[index], self.positions[index]
            tokens = tokens[index]
            self.rows = [self.rows[k] for k in keep]
        self.tokens = tokens
        self.stats.busy_s += time.perf_counter() - started


def _left_pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad dimension -2 (KV [rows, heads, T, dim]) or -1 (mask [rows, T]) on the left."""
    dim = -2 if tensor.dim() == 4 else -1
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def ensure_eval(model: torch.nn.Module) -> None:
    """`model.eval()` unless it already is (its recursive call is not free: docs/design.md
    §6.2)."""
    if model.training:
        model.eval()
