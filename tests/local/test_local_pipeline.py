"""The local policy inside the real four-stage rollout (toy env, in-memory retrieval), then one
trainer step on its samples: multi-turn samples keep exactly the sampled ids, and their stored
log-probs are what the trainer recomputes (observation tokens masked out)."""

from __future__ import annotations

import asyncio

import torch
from local_helpers import local_policy, tiny_llama

from evolving_rl.config.schema import LocalConfig, LossConfig
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.trainer import GRPOTrainer, build_token_batch, token_log_probs
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.tokenizer import IM_END, ByteChatTokenizer


class ByteTokenizer(ByteChatTokenizer):
    """The byte chat tokenizer with the attributes an HF tokenizer gives the local policy."""

    pad_token_id = IM_END

    def decode(self, token_ids, skip_special_tokens: bool = False) -> str:
        return super().decode(token_ids)


async def _rollout(ctx, policy: LocalPolicy):
    try:
        return await run_training_rollout(ctx, toy_rows(2), rollout_id=1)
    finally:
        await policy.close()


def test_rollout_with_local_policy_then_train(tmp_path):
    model = tiny_llama(vocab=IM_END + 1)
    tokenizer = ByteTokenizer()
    policy = local_policy(model, tokenizer, max_batch_generate=8, batch_window_s=0.01, seed=0)
    cfg = small_config(n_skills=2, top_k=2, n_repeats=1, max_steps=2, turn_tokens=12,
                       train_on_source_episode=True,  # random skills never parse
                       skill_format="compact")  # the CPU default's format: a short prompt
    ctx = fake_context(tmp_path, cfg, policy=policy)
    outcome = asyncio.run(_rollout(ctx, policy))
    samples = [s for s in outcome.samples if s.status.trainable]
    assert samples and policy.stats.step_rows > policy.stats.steps  # rows decoded together
    assert any(0 in s.loss_mask for s in samples)  # multi-turn: observation blocks masked
    batch = build_token_batch(samples, LossConfig(), IM_END, "cpu")
    with torch.no_grad():
        recomputed, _ = token_log_probs(model, batch)
    torch.testing.assert_close(recomputed, batch.old_log_probs, atol=1e-5, rtol=1e-5)
    trainer = GRPOTrainer(model, tiny_llama(vocab=IM_END + 1).requires_grad_(False),
                          LossConfig(lr=1e-3), LocalConfig(micro_batch_size=4), IM_END)
    metrics = trainer.step(outcome.samples)
    assert metrics.n_samples == len(samples) and abs(metrics.ratio - 1.0) < 1e-4
