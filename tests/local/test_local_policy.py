"""The in-process policy: batched = single-call results, merging of concurrent calls, per-row
stops, and log-probs that equal what the trainer recomputes for the same tokens.

Greedy token ids of two decode paths (batched or alone, reused prefix or not) are compared
exactly, log-probs within a tolerance: each such test first checks that every greedy choice wins
by a wide logit margin (`_assert_clear_greedy`), so float32 differences between the paths
(~1e-6) cannot flip a choice on any CPU."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import threading
import time

import pytest
import torch
from local_helpers import EOS_ID, PAD_ID, local_policy, tiny_llama

from evolving_rl.clients.policy import FinishReason, SamplingParams
from evolving_rl.config.schema import LocalConfig, LossConfig
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.engine.decoder import Decoder
from evolving_rl.local.engine.kv_cache import PrefixCache, shared_prefixes
from evolving_rl.local.trainer import build_token_batch, token_log_probs

GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=12)
SAMPLED = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=12)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20], [30, 31, 32, 33, 34]]
MIN_MARGIN = 1e-3  # top-1 minus top-2 logit; the tiny model's smallest here is ~0.05


def _assert_clear_greedy(model: torch.nn.Module, prompt: list[int], generation) -> None:
    """Every greedy choice of `generation` after `prompt` wins by more than MIN_MARGIN (one full
    forward, a third computation path)."""
    ids = torch.tensor([list(prompt) + list(generation.token_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
    top = logits.topk(2, dim=-1).values
    assert float((top[:, 0] - top[:, 1]).min()) > MIN_MARGIN, "near-tie: ids may differ by path"


def test_the_engine_settings_are_the_configs_and_only_there(tokenizer):
    """`LocalPolicy` reads its engine settings from the `local:` section: no default of its own
    (its prefix cache once defaulted to 0 entries where the config's default is 32)."""
    assert list(inspect.signature(LocalPolicy).parameters) == ["model", "tokenizer", "settings",
                                                               "seed"]
    for settings in (LocalConfig(), dataclasses.replace(
            LocalConfig(), max_batch_generate=3, batch_window_s=0.5, prefix_cache_entries=5,
            decode_backend="static", static_cache_tokens=256)):
        policy = LocalPolicy(tiny_llama(), tokenizer, settings, seed=0)
        assert (policy.max_batch, policy.window_s, policy.prefixes.capacity, policy.static,
                policy.static_tokens) == (
            settings.max_batch_generate, settings.batch_window_s, settings.prefix_cache_entries,
            settings.decode_backend == "static", settings.static_cache_tokens)


def _policy(tokenizer, **kwargs) -> LocalPolicy:
    return local_policy(tiny_llama(), tokenizer, **kwargs)


async def _concurrent(policy: LocalPolicy, prompts, sampling):
    try:
        return await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))
    finally:
        await policy.close()


def test_batched_greedy_equals_single_calls(tokenizer):
    single = _policy(tokenizer)
    expected = [single.generate_batch([p], [GREEDY])[0] for p in PROMPTS]
    policy = _policy(tokenizer, max_batch_generate=8, batch_window_s=0.05)
    got = asyncio.run(_concurrent(policy, PROMPTS, GREEDY))
    assert policy.stats.admissions == 1 and policy.stats.requests == len(PROMPTS)
    assert policy.stats.step_rows == len(PROMPTS) * policy.stats.steps  # all decoded together
    for prompt, g, e in zip(PROMPTS, got, expected, strict=True):
        _assert_clear_greedy(single.model, prompt, e)
        assert g.token_ids == e.token_ids and g.finish_reason == e.finish_reason
        assert g.log_probs == pytest.approx(e.log_probs, abs=1e-5)


def test_concurrent_calls_beyond_max_batch_are_split(tokenizer):
    policy = _policy(tokenizer, max_batch_generate=3, batch_window_s=0.05)
    prompts = PROMPTS + PROMPTS[:3]
    got = asyncio.run(_concurrent(policy, prompts, GREEDY))
    assert len(got) == 7 and policy.stats.requests == 7 and policy.stats.admissions >= 3
    assert policy.stats.step_rows <= 3 * policy.stats.steps
    _assert_clear_greedy(policy.model, prompts[0], got[0])
    assert got[0].token_ids == got[4].token_ids


def _hold_after_two_steps(policy: LocalPolicy) -> threading.Event:
    """The engine thread, after its second decode step, waits for another request to be queued,
    so that request can only join a running batch. Without the hold the test raced the engine
    thread: under load it once decoded all 12 steps before the loop submitted the second request
    (2 admissions, 22 steps of one row each). The event returned is set on reaching the hold."""
    reached, make = threading.Event(), policy.make_decoder

    def make_decoder(done) -> Decoder:
        decoder, steps = make(done), itertools.count(1)
        step = decoder.step

        def held_step() -> None:
            step()
            if next(steps) == 2:
                reached.set()
                deadline = time.monotonic() + 60
                while not policy._pending and time.monotonic() < deadline:
                    time.sleep(0.001)

        decoder.step = held_step
        return decoder

    policy.make_decoder = make_decoder
    return reached


async def _late_join(policy: LocalPolicy):
    reached = _hold_after_two_steps(policy)
    try:
        first = asyncio.ensure_future(policy.generate(PROMPTS[1], GREEDY))
        while not reached.is_set():  # the first request is decoding, held
            await asyncio.sleep(0.001)
        second = await policy.generate(PROMPTS[2], GREEDY)
        return await first, second
    finally:
        await policy.close()


def test_a_late_request_joins_the_running_batch(tokenizer):
    expected = [_policy(tokenizer).generate_batch([p], [GREEDY])[0] for p in PROMPTS[1:3]]
    policy = _policy(tokenizer, batch_window_s=0.0)
    got = asyncio.run(_late_join(policy))
    assert policy.stats.admissions == 2 and policy.stats.step_rows > policy.stats.steps
    for prompt, g, e in zip(PROMPTS[1:3], got, expected, strict=True):
        _assert_clear_greedy(policy.model, prompt, e)
        assert g.token_ids == e.token_ids
        assert g.log_probs == pytest.approx(e.log_probs, abs=1e-5)


def test_rows_stop_on_their_own(tokenizer):
    policy = _policy(tokenizer)
    free = policy.generate_batch([PROMPTS[0]], [GREEDY])[0]
    _assert_clear_greedy(policy.model, PROMPTS[0], free)
    stop_text = tokenizer.decode(free.token_ids[:3])
    short = SamplingParams(0.0, 1.0, -1, max_new_tokens=2)
    stopping = SamplingParams(0.0, 1.0, -1, max_new_tokens=12, stop=(stop_text,))
    a, b, c = policy.generate_batch([PROMPTS[0]] * 3, [short, stopping, GREEDY])
    assert a.token_ids == free.token_ids[:2] and a.finish_reason is FinishReason.LENGTH
    assert b.token_ids == free.token_ids[:3] and b.finish_reason is FinishReason.STOP
    assert c.token_ids == free.token_ids


def test_eos_ends_a_row_and_is_kept(tokenizer):
    free = _policy(tokenizer).generate_batch([PROMPTS[1]], [GREEDY])[0]
    eos = free.token_ids[2]
    tokenizer.eos_token_id = eos  # the model's own eos (generation_config) stays an eos too
    generation = _policy(tokenizer).generate_batch([PROMPTS[1]], [GREEDY])[0]
    first = free.token_ids.index(eos)
    assert generation.token_ids == free.token_ids[:first + 1]
    assert generation.finish_reason is FinishReason.STOP and EOS_ID not in generation.token_ids


def test_zero_new_tokens_is_an_empty_generation(tokenizer):
    policy = _policy(tokenizer)
    capped = GREEDY.capped(0)
    generation = asyncio.run(policy.generate(PROMPTS[0], capped))
    assert generation.token_ids == () and policy.stats.admissions == 0


def test_sampled_log_probs_match_the_trainer(tokenizer):
    """The old log-probs the trainer reads are the ones it would recompute itself."""
    policy = _policy(tokenizer, seed=5)
    hot = SamplingParams(temperature=1.3, top_p=0.9, top_k=20, max_new_tokens=10)
    generations = policy.generate_batch(PROMPTS, [SAMPLED, hot, SAMPLED, hot])
    samples = [TrainSample(role=Role.SOLVER, prompt_ids=p, response_ids=list(g.token_ids),
                           loss_mask=[1] * len(g.token_ids), log_probs=list(g.log_probs),
                           reward=0.0, group_id="g")
               for p, g in zip(PROMPTS, generations, strict=True)]
    batch = build_token_batch(samples, LossConfig(), PAD_ID, "cpu")
    with torch.no_grad():
        recomputed, _ = token_log_probs(policy.model, batch)
    torch.testing.assert_close(recomputed, batch.old_log_probs, atol=1e-5, rtol=1e-5)


def _continue(prompt, generation, observation):
    return list(prompt) + list(generation.token_ids) + observation


def test_prefix_reuse_gives_the_same_generations(tokenizer):
    """Turn 2 of several episodes reuses turn 1's KV; results equal a policy without reuse."""
    starts = [list(range(2, 22)), list(range(30, 55)), list(range(40, 58))]
    observations = [[3, 4, 5], [7, 8, 9, 10, 11, 12], [13]]
    reusing = _policy(tokenizer, prefix_cache_entries=8)
    plain = _policy(tokenizer, prefix_cache_entries=0)
    first = reusing.generate_batch(starts[:2], [GREEDY, GREEDY])
    second = [_continue(p, g, o) for p, g, o in zip(starts, first, observations, strict=False)]
    second.append(starts[2])  # a row with nothing to reuse, in the same batch
    got = reusing.generate_batch(second, [GREEDY] * 3)
    expected = [plain.generate_batch([p], [GREEDY])[0] for p in second]
    assert reusing.prefixes.hits == 2 and plain.prefixes is None
    for prompt, g, e in zip(second, got, expected, strict=True):
        _assert_clear_greedy(plain.model, prompt, e)
        assert g.token_ids == e.token_ids
        assert g.log_probs == pytest.approx(e.log_probs, abs=1e-5)


def test_prefix_cache_keeps_the_longest_and_evicts_oldest():
    cache = PrefixCache(capacity=2, min_tokens=2)
    kv = [(torch.zeros(1, 9, 2), torch.zeros(1, 9, 2))]
    cache.store([1, 2, 3, 4], [(k[:, :4], v[:, :4]) for k, v in kv], cache.epoch)
    cache.store([1, 2, 3, 4, 5, 6], [(k[:, :6], v[:, :6]) for k, v in kv], cache.epoch)
    assert len(cache) == 1  # the shorter entry was a prefix: superseded
    n, reused = cache.lookup([1, 2, 3, 4, 5, 9, 9])
    assert n == 5 and reused[0][0].shape == (1, 5, 2)
    assert cache.lookup([1, 2, 3, 4, 5, 6])[0] == 5  # at least one token left to encode
    assert cache.lookup([7, 7, 7])[0] == 0
    cache.store([8, 8, 8], [(k[:, :3], v[:, :3]) for k, v in kv], cache.epoch)
    cache.store([9, 9, 9], [(k[:, :3], v[:, :3]) for k, v in kv], cache.epoch)
    assert len(cache) == 2 and cache.lookup([1, 2, 3, 4, 0])[0] == 0  # oldest evicted


def test_shared_prefixes_are_the_longest_shared_with_another_prompt():
    system = list(range(2, 22))
    prompts = [system + [30, 31, 32], system + [30, 31, 40], system + [50], [60] * 25,
               system[:5] + [70] * 20]
    assert shared_prefixes(prompts, min_tokens=16) == [system + [30, 31]]  # covers system too
    assert shared_prefixes(prompts[:1], min_tokens=16) == []
    assert shared_prefixes([system, system], min_tokens=16) == [system[:-1]]  # never a whole one


def test_an_admission_encodes_a_shared_prefix_once(tokenizer):
    """Rows sharing a prompt prefix reuse one encoding of it; results equal single calls."""
    system = list(range(2, 42))
    prompts = [system + [50 + i] * (i + 1) for i in range(4)] + [list(range(10, 30))]
    policy = _policy(tokenizer, prefix_cache_entries=8)
    got = policy.generate_batch(prompts, [GREEDY] * len(prompts))
    expected = [_policy(tokenizer).generate_batch([p], [GREEDY])[0] for p in prompts]
    assert policy.stats.shared_prefix_tokens == len(system)
    assert policy.prefixes.hits == 4 and policy.prefixes.reused_tokens == 4 * len(system)
    for prompt, g, e in zip(prompts, got, expected, strict=True):
        _assert_clear_greedy(policy.model, prompt, e)
        assert g.token_ids == e.token_ids
        assert g.log_probs == pytest.approx(e.log_probs, abs=1e-5)


def test_no_reuse_after_the_weights_changed(tokenizer):
    policy = _policy(tokenizer, prefix_cache_entries=8)
    prompt = list(range(2, 22))
    first = policy.generate_batch([prompt], [GREEDY])[0]
    policy.weights_changed()
    policy.generate_batch([_continue(prompt, first, [3])], [GREEDY])
    assert policy.prefixes.hits == 0


@pytest.mark.parametrize("backend", ["dynamic", "static"])
def test_a_row_admitted_before_the_weights_changed_stores_nothing(tokenizer, backend):
    """A row still decoding when the weights change holds KV of the old weights: on finishing it
    stores nothing, and a later prompt extending it reuses nothing."""
    policy = _policy(tokenizer, prefix_cache_entries=8, decode_backend=backend,
                     static_cache_tokens=128)
    prompt = list(range(2, 22))
    results: dict = {}
    decoder = policy.make_decoder(results.__setitem__)
    decoder.admit([(0, prompt, GREEDY)])
    policy.weights_changed()
    while len(decoder):
        decoder.step()
    assert len(policy.prefixes) == 0 and policy.prefixes.stale_stores == 1
    policy.generate_batch([_continue(prompt, results[0], [3])], [GREEDY])
    assert policy.prefixes.hits == 0


def test_a_clear_from_another_thread_waits_for_a_store(monkeypatch):
    """`weights_changed` runs on the caller's thread while the engine thread stores: the clear
    waits for the store to finish (it used to empty the entries mid-store: a KeyError that
    killed the engine thread), and the entry stored under the old epoch goes with it."""

    import numpy as np

    from evolving_rl.local.engine import kv_cache

    cache = PrefixCache(capacity=4, min_tokens=2)
    kv = [(torch.zeros(1, 9, 2), torch.zeros(1, 9, 2))]
    cache.store([1, 2, 3], [(k[:, :3], v[:, :3]) for k, v in kv], cache.epoch)
    clearing = threading.Thread(target=cache.clear)
    real_equal = np.array_equal

    def equal_then_clear(a, b):  # the other thread clears while this one is inside the store
        if not clearing.is_alive() and cache.epoch == 0:
            clearing.start()
            clearing.join(timeout=0.5)
        return real_equal(a, b)

    monkeypatch.setattr(kv_cache.np, "array_equal", equal_then_clear)
    cache.store([1, 2, 3, 4], [(k[:, :4], v[:, :4]) for k, v in kv], cache.epoch)
    clearing.join()
    assert cache.epoch == 1 and len(cache) == 0
