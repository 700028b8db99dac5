"""SGLang's prefix-cache counts through the pipeline: a rollout against the fake SGLang server
(which answers `prompt_tokens` and a radix cache's `cached_tokens`) gives every sample the sum of
the counts of the calls that sampled it; slime turns those into its prefix-cache hit rate
(tests/slime/test_hook_contracts.py)."""

from __future__ import annotations

import asyncio

from env.launch import free_port
from evolving_rl.clients.policy import SGLangPolicyClient
from evolving_rl.core.samples import TrainSample
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.sglang_server import FakeSGLang


async def _rollout(tmp_path) -> list[TrainSample]:
    fake = FakeSGLang()
    url = await fake.start(free_port())
    cfg = small_config(train_on_source_episode=True)
    policy = SGLangPolicyClient.open(url, cfg.clients)
    try:
        outcome = await run_training_rollout(fake_context(tmp_path, cfg, policy=policy),
                                             toy_rows(2), rollout_id=0)
        return outcome.samples
    finally:
        await policy.close()
        await fake.stop()


def _generated_blocks(sample: TrainSample) -> list[tuple[int, int]]:
    """(start, end) of each run of sampled tokens, as positions in `sample.tokens`: a call's
    input was the tokens before its start."""
    blocks, offset = [], len(sample.prompt_ids)
    for i, mask in enumerate(sample.loss_mask):
        if mask and (i == 0 or not sample.loss_mask[i - 1]):
            blocks.append([offset + i, offset + i + 1])
        elif mask:
            blocks[-1][1] = offset + i + 1
    return [(start, end) for start, end in blocks]


def test_each_sample_sums_the_counts_of_the_calls_that_sampled_it(tmp_path):
    samples = asyncio.run(_rollout(tmp_path))
    multi_turn = 0
    for sample in samples:
        blocks = _generated_blocks(sample)
        cache = sample.prefix_cache
        assert cache.prompt_tokens == sum(start for start, _ in blocks)
        # each later turn's input extends the earlier input and reply, which the cache holds
        assert sum(end for _, end in blocks[:-1]) <= cache.cached_tokens <= cache.prompt_tokens
        multi_turn += len(blocks) > 1
    assert multi_turn > 0 and sum(s.prefix_cache.cached_tokens for s in samples) > 0
