"""The in-process policy: an HF causal LM behind the pipeline's `PolicyClient` interface.

Owns `LocalPolicy`: `generate` (async, what the episode loop awaits) hands each request to one
engine thread that runs a continuous batch (`decoder.Decoder`). When the engine is idle, the first
request waits `window_s` for concurrent ones so that they are encoded together; while it decodes,
requests that arrive join the running batch at the next step (up to `max_batch` rows), and each
finished row's result is handed back at once. The event loop is never blocked: env and retrieval I/O
of other episodes proceed while the model runs. `generate_batch` decodes a list of prompts
synchronously through the same decoder (tests, benchmarks); do not call it while the engine thread
is serving. `score` (the teacher's log-probs, docs/design.md §4.6) is a forward pass the engine
thread runs between decode steps (`scoring.score_tokens`), so it never races the decoder.

Returned ids are exactly the sampled ones; returned log-probs are the raw model's (temperature
1, before top-k/top-p), which is what the trainer recomputes (`local.trainer.token_log_probs`). A KV
prefix stored by an earlier call is reused when a prompt extends it (multi-turn episodes then
encode only their new observation block). The model is shared with the trainer: do not train
while a rollout generates, and call `weights_changed` after every optimiser step so that no KV
computed with the old weights is reused. On CPU the model's linear layers decode with transposed
weight copies (`linear_layout`), rebuilt after each weight update.

Its engine settings are the config's `local:` section (`LocalConfig`: `max_batch_generate`,
`batch_window_s`, `prefix_cache_entries`, `decode_backend`, `static_cache_tokens`), read from there
alone, so a policy built anywhere gets the profile's values and the schema's defaults.
`decode_backend` picks the decoder: "dynamic" (`Decoder`: a KV cache that grows with the batch,
the CPU path), "static" (`StaticDecoder`: `max_batch` pre-allocated KV slots of `static_tokens`
tokens, device-side sampling, one host sync per step, CUDA-graph replay on a GPU) or "auto"
(static on CUDA, dynamic elsewhere). The static engine and its captured graphs live as long as
the policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from evolving_rl.clients.policy import FinishReason, Generation, PolicyError, SamplingParams
from evolving_rl.config.schema import LocalConfig
from evolving_rl.local.engine.decoder import Decoder, DecodeStats
from evolving_rl.local.engine.kv_cache import PrefixCache, full_attention_only
from evolving_rl.local.engine.linear_layout import use_transposed_weights
from evolving_rl.local.engine.scoring import score_tokens
from evolving_rl.local.engine.slot_engine import SlotEngine
from evolving_rl.local.engine.static_decode import StaticDecoder

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop


@dataclass
class _Score:
    """One pending `score` call: the ids, where scoring starts, and who awaits it."""

    token_ids: list[int]
    start: int
    future: asyncio.Future[list[float]]
    loop: asyncio.AbstractEventLoop


def _resolve(future: asyncio.Future[Any], generation: Any) -> None:
    if not future.done():  # the episode may have been cancelled meanwhile
        future.set_result(generation)


def _reject(future: asyncio.Future[Any], error: PolicyError) -> None:
    if not future.done():
        future.set_exception(error)


def _resolve_all(finished: list[tuple[_Request, Generation]]) -> None:
    """Hand each finished row's generation to its caller's loop; empties `finished`."""
    for request, generation in finished:
        request.loop.call_soon_threadsafe(_resolve, request.future, generation)
    finished.clear()


def eos_ids(model: torch.nn.Module, tokenizer: Any) -> frozenset[int]:
    """The tokenizer's eos and every eos id of the model's generation config."""
    ids = {int(tokenizer.eos_token_id)}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, list):
        ids.update(int(i) for i in config_eos)
    return frozenset(ids)


class LocalPolicy:
    """`PolicyClient` over an in-process HF causal LM, with continuous batching."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, settings: LocalConfig, *,
                 seed: int) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_batch, self.window_s = settings.max_batch_generate, settings.batch_window_s
        device = next(model.parameters()).device
        backend = settings.decode_backend
        if backend not in ("auto", "dynamic", "static"):
            raise ValueError(f"decode_backend must be auto, dynamic or static: {backend!r}")
        self.static = backend == "static" or (backend == "auto" and device.type == "cuda")
        self.static_tokens = settings.static_cache_tokens
        self._engine: SlotEngine | None = None
        if device.type == "cpu":
            use_transposed_weights(model)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        entries = settings.prefix_cache_entries
        reuse = entries > 0 and full_attention_only(model)
        self.prefixes = PrefixCache(entries) if reuse else None
        # transformers 5.x renamed the KV-cache argument and output `past_key_values` -> `cache`
        self._cache_name = ("cache" if "cache" in inspect.signature(model.forward).parameters
                            else "past_key_values")
        self._eos = eos_ids(model, tokenizer)
        self.stats = DecodeStats()
        self._stats_lock = threading.Lock()
        self._pending: deque[_Request] = deque()
        self._scoring: deque[_Score] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def make_decoder(self, done: Any) -> Decoder:
        """A fresh decoder of this policy's model and engine (tests, benchmarks); `done(key,
        generation)` receives each finished row."""
        args = (self.model, self.tokenizer, self._eos, self.generator, self.prefixes,
                self._cache_name, done)
        if not self.static:
            return Decoder(*args)
        if self._engine is None:
            self._engine = SlotEngine(self.model, self._cache_name, self.max_batch,
                                      self.static_tokens, graphs=True)
        return StaticDecoder(*args, engine=self._engine)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if sampling.max_new_tokens <= 0:
            return Generation((), (), FinishReason.LENGTH)
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), sampling, loop.create_future(), loop)
        self._submit(self._pending, request)
        return await request.future

    async def score(self, token_ids: list[int], start: int,
                    temperature: float = 1.0) -> list[float]:
        """Raw-model log-probs of `token_ids[start:]` (temperature 1 whatever `temperature`: the
        local backend's sampled log-probs are raw too, see the module docstring)."""
        loop = asyncio.get_running_loop()
        request = _Score(list(token_ids), start, loop.create_future(), loop)
        self._submit(self._scoring, request)
        return await request.future

    def _submit(self, queue: deque[Any], request: Any) -> None:
        """Queue a request for the engine thread, starting the thread if it is not running."""
        with self._wake:
            queue.append(request)
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._serve, name="local-policy",
                                                daemon=True)
                self._thread.start()
            self._wake.notify()

    def _score_pending(self) -> None:
        """Answer every queued `score` call (engine thread, between decode steps)."""
        while True:
            with self._wake:
                if not self._scoring:
                    return
                request = self._scoring.popleft()
            if request.future.done():
                continue
            try:
                values = score_tokens(self.model, request.token_ids, request.start)
            except (RuntimeError, ValueError) as error:
                logger.error("local scoring failed: %s", error)
                request.loop.call_soon_threadsafe(_reject, request.future, PolicyError(str(error)))
            else:
                request.loop.call_soon_threadsafe(_resolve, request.future, values)

    def _next_requests(self, running: int) -> list[_Request] | None:
        """Requests to admit now ([] while decoding with nothing new); None when stopping."""
        with self._wake:
            while not (self._pending or self._scoring) and not running and not self._stopping:
                self._wake.wait()
            if self._stopping:
                return None
        if not running and self.window_s > 0:
            time.sleep(self.window_s)  # idle: let concurrent calls arrive before encoding
        taken = []
        with self._wake:
            while self._pending and running + len(taken) < self.max_batch:
                request = self._pending.popleft()
                if not request.future.done():
                    taken.append(request)
        return taken

    def _serve(self) -> None:
        """The engine thread: admit pending requests at step boundaries, decode, count, then
        resolve the rows that finished, repeat. Counted first: a caller that awaits its last
        generation and then calls `take_stats` finds that generation's tokens in them."""
        finished: list[tuple[_Request, Generation]] = []
        decoder = self.make_decoder(lambda request, generation: finished.append(
            (request, generation)))
        while (taken := self._next_requests(len(decoder))) is not None:
            self._score_pending()
            try:
                if taken:
                    decoder.admit([(r, r.prompt_ids, r.sampling) for r in taken])
                if len(decoder):
                    decoder.step()
            except (RuntimeError, ValueError) as error:  # what torch raises (e.g. out of memory)
                logger.error("local generation failed: %s", error)
                failed = PolicyError(str(error))
                _resolve_all(finished)  # rows that finished before the error keep their result
                for request in [*taken, *(row.key for row in decoder.rows)]:
                    request.loop.call_soon_threadsafe(_reject, request.future, failed)
                decoder = self.make_decoder(decoder.done)
            self._add_stats(decoder)
            _resolve_all(finished)
        for row in decoder.rows:  # stopped mid-decode: nobody will resolve these
            row.key.loop.call_soon_threadsafe(row.key.future.cancel)

    def _add_stats(self, decoder: Decoder) -> None:
        stats, decoder.stats = decoder.stats, DecodeStats()
        with self._stats_lock:  # take_stats swaps self.stats on the caller's thread
            for field in dataclasses.fields(DecodeStats):
                setattr(self.stats, field.name,
                        getattr(self.stats, field.name) + getattr(stats, field.name))

    def generate_batch(self, prompts: Sequence[Sequence[int]],
                       samplings: Sequence[SamplingParams]) -> list[Generation]:
        """Decode `prompts` together, synchronously; one `Generation` per prompt, in order."""
        results: dict[int, Generation] = {}
        decoder = self.make_decoder(results.__setitem__)
        queue = [(i, list(p), s) for i, (p, s) in enumerate(zip(prompts, samplings, strict=True))]
        limit = self.max_batch if self.static else len(queue)  # static: one slot per row
        while queue or len(decoder):
            if queue and len(decoder) < limit:
                taken, queue = queue[:limit - len(decoder)], queue[limit - len(decoder):]
                decoder.admit(taken)
            if len(decoder):
                decoder.step()
        self._add_stats(decoder)
        return [results[i] for i in range(len(prompts))]

    def take_stats(self) -> dict[str, float]:
        """Engine and prefix-reuse counters since the last call (then reset)."""
        with self._stats_lock:
            stats, self.stats = self.stats, DecodeStats()
        out = {"policy/admissions": float(stats.admissions),
               "policy/requests": float(stats.requests), "policy/decode_steps": float(stats.steps),
               "policy/rows_per_step": stats.step_rows / stats.steps if stats.steps else 0.0,
               "policy/new_tokens": float(stats.tokens), "policy/busy_s": stats.busy_s,
               "policy/admit_s": stats.admit_s,
               "policy/shared_prefix_tokens": float(stats.shared_prefix_tokens)}
        if self.prefixes is not None:
            out["policy/prefix_hits"] = float(self.prefixes.hits)
            out["policy/prefix_reused_tokens"] = float(self.prefixes.reused_tokens)
            self.prefixes.hits = self.prefixes.reused_tokens = 0
        return out

    def weights_changed(self) -> None:
        """Call after every optimiser step: stored KV prefixes belong to the old weights."""
        if self.prefixes is not None:
            self.prefixes.clear()

    async def close(self) -> None:
        """Stop the engine thread; requests still waiting are cancelled."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
            thread, self._thread = self._thread, None
            pending = [*self._pending, *self._scoring]
            self._pending.clear()
            self._scoring.clear()
        if thread is not None:
            await asyncio.to_thread(thread.join)
        for request in pending:
            request.future.cancel()
