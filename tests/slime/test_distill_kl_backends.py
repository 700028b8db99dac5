"""`train/distill_kl` means one thing on both backends (docs/design.md §4.6): the sampled reverse
KL old - teacher summed over student tokens and divided by every trained token of the step. One
batch of samples (two students among extractor and solver samples) goes through the local
trainer and, split in two micro-batches, through our slime loss and slime's step reduction
(`reduce_train_step_metrics` of slime/observability/train_metric_utils.py where slime imports,
else its arithmetic: per-micro-batch sums over `--calculate-per-token-loss`, divided by the
step's tokens)."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from slime_fixtures import (
    SLIME_IMPORTABLE,
    TEST_LOSS,
    given_log_probs_and_entropy,
    slime_batch,
    sum_of_token_reducer,
    teacher_samples,
)

from evolving_rl import slime_hooks
from evolving_rl.config.schema import LocalConfig, LossConfig, RoleCoefficients
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.trainer import GRPOTrainer
from evolving_rl.slime_bridge import slime_api
from evolving_rl.slime_bridge.loss import custom_policy_loss
from evolving_rl.slime_bridge.samples import to_slime_groups
from evolving_rl.slime_bridge.settings import load_run_config

DISTILL_COEF = 0.7
VOCAB = 151646  # the fixtures' token ids are Qwen2.5's


def _expected(samples: list[TrainSample]) -> float:
    kl = sum(o - t for s in samples if s.teacher_log_probs is not None
             for o, t, m in zip(s.log_probs, s.teacher_log_probs, s.loss_mask, strict=True) if m)
    return kl / sum(sum(s.loss_mask) for s in samples)


def _local_distill_kl(samples: list[TrainSample]) -> float:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)).eval()
    loss = LossConfig(kl_coef=RoleCoefficients(**TEST_LOSS["kl_coef"]),
                      entropy_coef=RoleCoefficients(**TEST_LOSS["entropy_coef"]),
                      distill_coef=DISTILL_COEF)
    trainer = GRPOTrainer(model, copy.deepcopy(model), loss,
                          LocalConfig(micro_batch_size=3, gradient_checkpointing=False,
                                      torch_threads=1), pad_id=0)
    return trainer.evaluate_loss(samples)["distill_kl"]


def _micro_batch_values(args, samples, slime_types, monkeypatch) -> tuple[list[str], torch.Tensor]:
    """What slime's `loss_function` hands the step for one micro-batch: [tokens, metrics...]."""
    converted = [s for group in to_slime_groups(samples, slime_types.sample) for s in group]
    data = slime_hooks.convert_samples_to_train_data(args, converted)
    old = [torch.tensor(lp) for lp in data["rollout_log_probs"]]  # the sampled ones, as locally
    batch = slime_batch(data, old, [o - 0.3 for o in old])
    monkeypatch.setattr(slime_api, "log_probs_and_entropy", given_log_probs_and_entropy(
        [o + 0.05 for o in old], [torch.full_like(o, 1.5) for o in old]))
    logits = torch.zeros(1, sum(batch["total_lengths"]), 8)
    _, metrics = custom_policy_loss(args, batch, logits, sum_of_token_reducer(batch),
                                    load_run_config(args))
    tokens = sum(torch.clamp_min(mask.sum(), 1) for mask in batch["loss_masks"])
    return list(metrics), torch.tensor([float(tokens), *(float(v) for v in metrics.values())])


def _step_metrics(keys: list[str], per_micro_batch: list[torch.Tensor], monkeypatch) -> dict:
    if not SLIME_IMPORTABLE:
        total = sum(per_micro_batch)
        return {key: float(value) / float(total[0]) for key, value in zip(keys, total[1:])}
    import torch.distributed as dist
    from slime.observability.train_metric_utils import reduce_train_step_metrics

    monkeypatch.setattr(dist, "all_reduce", lambda tensor, group=None: None)  # one rank
    return reduce_train_step_metrics(
        [{"keys": keys, "values": values} for values in per_micro_batch],
        calculate_per_token_loss=True, step_global_batch_size=0, cp_size=1,
        dp_with_cp_group=None)


def _slime_distill_kl(slime_args, tmp_path, samples, slime_types, monkeypatch) -> float:
    config = tmp_path / "teacher.yaml"
    config.write_text(yaml.safe_dump({
        "environment": "alfworld", "loss": {**TEST_LOSS, "distill_coef": DISTILL_COEF},
        "pipeline": {"source_tasks_per_rollout": 2, "skill_use": "teacher"}}))
    slime_args.evolving_rl_config = str(config)
    halves = (samples[:7], samples[7:])  # a student in each
    assert all(any(s.teacher_log_probs for s in half) for half in halves)
    per_micro_batch = [_micro_batch_values(slime_args, half, slime_types, monkeypatch)
                       for half in halves]
    keys = per_micro_batch[0][0]
    return _step_metrics(keys, [values for _, values in per_micro_batch], monkeypatch)[
        "distill_kl"]


def test_both_backends_report_the_same_distill_kl(slime_args, slime_types, tmp_path,
                                                   monkeypatch):
    samples = teacher_samples()
    assert sum(s.teacher_log_probs is not None for s in samples) == 2
    expected = _expected(samples)
    local = _local_distill_kl(samples)
    slime = _slime_distill_kl(slime_args, tmp_path, samples, slime_types, monkeypatch)
    assert local == pytest.approx(expected, abs=1e-5)
    assert slime == pytest.approx(expected, abs=1e-5)
    # the mean over student tokens alone, the local backend's old definition, is another number
    students = [s for s in samples if s.teacher_log_probs is not None]
    assert _expected(students) > 2 * expected
