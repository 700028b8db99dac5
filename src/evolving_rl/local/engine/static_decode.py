"""Continuous batching over a static per-slot KV cache: the decode path that keeps a GPU busy.

Owns `StaticDecoder`, a `Decoder` whose running rows live in the slots of a `SlotEngine`
(`slot_engine`). Admission is the dynamic decoder's (one prefill with prefix reuse, first token
sampled as there); each row that keeps running then has its KV copied into
the lowest free slot. A step draws the uniforms of the sampled rows in one call, in row order —
the numbers `Decoder` draws (`sampling.draw_uniforms`), so with one seed both decoders sample the
same tokens — runs the
engine on the smallest row bucket that holds every occupied slot and the smallest KV window that
holds every row's next column (a CUDA graph replay on a GPU), and copies [token, log-prob] of
those slots to the host once: the step's only host sync. Stop strings and finish reasons are then
checked on the host as in `Decoder`; the finished rows' KV is copied out of their slots for the
prefix cache and the slots are freed. A row whose context reaches the engine's capacity
(`local.static_cache_tokens`) finishes with `length`.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Sequence

import torch

from evolving_rl.clients.policy import FinishReason, Generation
from evolving_rl.local.engine.decoder import Decoder, Done, Row, ensure_eval
from evolving_rl.local.engine.growing_cache import GrowingCache
from evolving_rl.local.engine.kv_cache import PrefixCache, cache_layers
from evolving_rl.local.engine.sampling import draw_uniforms, filters
from evolving_rl.local.engine.slot_cache import CopyPlan
from evolving_rl.local.engine.slot_engine import SlotEngine, StepShape, bucket_for

logger = logging.getLogger(__name__)


def _cached(row: Row) -> int:
    """Tokens of `row` in its slot: the prompt and every sampled id but the last (unfed)."""
    return len(row.prompt) + len(row.ids) - 1


class StaticDecoder(Decoder):
    """`Decoder` whose running batch lives in a `SlotEngine` (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, tokenizer: object, eos_ids: frozenset[int],
                 generator: torch.Generator, prefixes: PrefixCache | None, cache_name: str,
                 done: Done, engine: SlotEngine) -> None:
        super().__init__(model, tokenizer, eos_ids, generator, prefixes, cache_name, done)
        self.engine = engine
        engine.release(engine.device_index(list(range(len(engine.feed)))))  # all slots free
        self.free_slots = list(range(len(engine.feed)))  # a heap: the lowest slot first
        self._draw_index: torch.Tensor | None = None  # slots of the sampled rows, in row order

    def _merge(self, rows: list[Row], cache: GrowingCache, mask: torch.Tensor,
               positions: torch.Tensor, tokens: torch.Tensor) -> None:
        """Copy the new rows' prefill KV (their mask's columns) into free slots."""
        fits = []
        for k, row in enumerate(rows):
            if len(row.prompt) < self.engine.capacity:
                fits.append(k)
            else:
                self._finish_full(row)
        if not fits:
            return
        for k in fits:
            rows[k].slot = heapq.heappop(self.free_slots)
        plan = CopyPlan.build(mask.bool().cpu(), fits, [rows[k].slot for k in fits], self.device)
        index = torch.tensor(fits, device=self.device)
        self.engine.admit(cache_layers(cache), plan, tokens[index],
                          [rows[k].sampling for k in fits])
        self.rows.extend(rows[k] for k in fits)
        self._draw_index = None

    def _finish_full(self, row: Row) -> None:
        logger.warning("a %d-token context reached the static KV capacity (%d tokens): finished "
                       "with 'length'; raise local.static_cache_tokens", _cached(row) + 1,
                       self.engine.capacity)
        self.stats.tokens += len(row.ids)
        self.done(row.key, Generation(tuple(row.ids), tuple(row.log_probs), FinishReason.LENGTH))

    def _draw(self) -> None:
        """Draw this step's uniforms (one per sampled row, row order) into their slots."""
        draws = draw_uniforms([row.sampling for row in self.rows], self.generator, self.device)
        if draws is None:
            return
        if self._draw_index is None:
            slots = [row.slot for row in self.rows if row.sampling.temperature != 0.0]
            self._draw_index = self.engine.device_index(slots)
        self.engine.uniforms.index_copy_(0, self._draw_index, draws)

    def _release(self, rows: list[Row]) -> None:
        """Free the slots of finished `rows`, first storing their KV (one copy per layer for
        all of them) for prompts that extend them."""
        if not rows:
            return
        slots = [row.slot for row in rows]
        if self.prefixes is not None:
            for row, kv in zip(rows, self.engine.cache.rows_kv(
                    self.engine.device_index(slots), [_cached(row) for row in rows]),
                    strict=True):
                self.prefixes.store(row.prompt + row.ids[:-1], kv, row.epoch)
        self.engine.release(self.engine.device_index(slots))
        for slot in slots:
            heapq.heappush(self.free_slots, slot)
        self._draw_index = None

    def _collect(self, results: Sequence[Sequence[float]]) -> None:
        """Record every row's new token; release the rows that finished."""
        running, finished = [], []
        for row in self.rows:
            token, log_prob = results[row.slot]
            if not self._record(row, int(token), log_prob):
                finished.append(row)
            elif _cached(row) >= self.engine.capacity:
                self._finish_full(row)
                finished.append(row)
            else:
                running.append(row)
        self.rows = running
        self._release(finished)

    @torch.inference_mode()
    def step(self) -> None:
        """Feed every row its last token, sample the next on the device, retire finished rows."""
        started = time.perf_counter()
        ensure_eval(self.model)
        engine = self.engine
        self._draw()
        shape = StepShape(
            rows=bucket_for(max(row.slot for row in self.rows) + 1, engine.row_buckets),
            window=bucket_for(max(_cached(row) for row in self.rows) + 1, engine.windows),
            filtered=filters([row.sampling for row in self.rows]))
        engine.step(shape)
        results = engine.result[:shape.rows].tolist()  # the step's one host sync
        self.stats.steps += 1
        self.stats.step_rows += len(self.rows)
        self._collect(results)
        self.stats.busy_s += time.perf_counter() - started
