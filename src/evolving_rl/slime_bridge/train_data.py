"""slime train data from our samples, carrying each token's role (and teacher) to the loss.

Owns the custom convert-samples-to-train-data step (slime's RolloutManager calls it instead of its
own conversion, pinned commit 624b824a). Two facts of slime's data path shape it:

1. Only a fixed set of keys survives from the train data to the loss. `_split_train_data_by_dp`
   (slime/ray/rollout.py) forwards tokens, response_lengths, rewards, truncated, loss_masks,
   round_number, sample_indices, rollout_ids, rollout_mask_sums, rollout_log_probs, top-p and
   routing replays, source_names, prompt, teacher_log_probs (+ raw_reward, total_lengths); and
   the training `forward_step` (slime/backends/megatron_utils/model.py) asks `get_batch` for
   tokens, total_lengths, response_lengths, loss_masks, log_probs, ref_log_probs, values,
   advantages, returns, rollout_log_probs, teacher_log_probs, rollout_mask_sums (+ top-p keys).
   An extra key such as "kl_coef" or a sample's `train_metadata` is dropped on the way. The one
   per-token float field that survives end to end and that slime leaves alone unless on-policy
   distillation is on (`--use-opd`, refused by `check_slime_args`) is `teacher_log_probs`: it is
   tensorised, context-parallel sliced like the log-probs (actor `_get_rollout_data`) and handed
   to the loss as `batch["teacher_log_probs"]`. We put the role code there (`ROLE_CODES`, one value
   per response token); the loss maps it to the role's KL and entropy coefficients from our
   config. Under `pipeline.skill_use: teacher` a student's trained token also carries its
   teacher log-prob v (slime's `Sample.teacher_log_probs`, docs/design.md §4.6) in the same
   value: code `TEACHER_BASE - v` (v <= 0, so the code is >= 2 and never a role code); the
   student's tokens off the loss mask carry the solver code. The loss decodes a code >= 2 as a
   solver token distilled toward teacher log-prob `TEACHER_BASE - code` (float32 on the way:
   exact to about 6e-8 x |code|). (slime also logs the channel's masked mean as
   `rollout/teacher_log_probs`: the extractor share when no sample has a teacher.)
2. Training steps are cut by rollout id: `build_dp_schedule` makes `len(unique ids) //
   global_batch_size` optimiser steps and drops the remainder. Our sample count varies (failed
   samples are removed), so we spread the samples over exactly `global_batch_size` contiguous
   rollout ids: one optimiser step per rollout whatever the count. With
   `--calculate-per-token-loss` (required) the ids do not change the loss value.

`rewards` holds our advantages (slime's GRPO broadcasts them per token unchanged), `raw_reward`
the raw rewards. With `--rollout-top-p` < 1 the train data also carries every sample's nucleus
(`rollout_top_p_token_ids` / `rollout_top_p_token_offsets`), checked as slime's own conversion
checks it (slime/ray/rollout.py:718-732): slime's loss masks the recomputed log-probs to it and
refuses to run without it (slime/backends/megatron_utils/loss.py:83-94).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from evolving_rl.core.roles import Role
from evolving_rl.slime_bridge.samples import SampleTag, flatten, post_process_rewards

ROLE_CHANNEL_KEY = "teacher_log_probs"
ROLE_CODES: dict[Role, float] = {Role.SOLVER: 0.0, Role.EXTRACTOR: 1.0}
TEACHER_BASE = 2.0  # a student token's code is TEACHER_BASE - its teacher log-prob (>= 2)


def rollout_buckets(n_samples: int, n_buckets: int) -> list[int]:
    """Contiguous rollout ids 0..n_buckets-1 over the samples, every id used at least once."""
    if n_buckets < 1:
        raise ValueError(f"global_batch_size must be >= 1, got {n_buckets}")
    if n_samples < n_buckets:
        raise ValueError(
            f"only {n_samples} trainable samples for --global-batch-size {n_buckets}: slime "
            "would make zero optimiser steps; lower --global-batch-size or fix the rollout")
    return [i * n_buckets // n_samples for i in range(n_samples)]


def _loss_mask(sample: Any) -> list[int]:
    mask = list(sample.loss_mask) if sample.loss_mask is not None else [1] * sample.response_length
    if len(mask) != sample.response_length:
        raise ValueError(f"sample {sample.index}: loss mask has {len(mask)} entries for "
                         f"{sample.response_length} response tokens")
    return [0] * sample.response_length if sample.remove_sample else mask


def _log_probs(sample: Any) -> list[float]:
    log_probs = sample.rollout_log_probs
    if log_probs is None or len(log_probs) != sample.response_length:
        raise ValueError(f"sample {sample.index}: rollout log-probs missing or misaligned")
    return list(log_probs)


def channel_codes(sample: Any, role: Role, loss_mask: list[int]) -> list[float]:
    """A sample's per-token channel values: its role code, or on a student's trained tokens
    `TEACHER_BASE - teacher log-prob` (module docstring)."""
    teacher = getattr(sample, "teacher_log_probs", None)
    if teacher is None:
        return [ROLE_CODES[role]] * sample.response_length
    if role is not Role.SOLVER:
        raise ValueError(f"sample {sample.index}: a {role.value} sample with teacher log-probs; "
                         "only solver (student) samples are distilled")
    if len(teacher) != sample.response_length:
        raise ValueError(f"sample {sample.index}: {len(teacher)} teacher log-probs for "
                         f"{sample.response_length} response tokens")
    codes = []
    for position, (value, trained) in enumerate(zip(teacher, loss_mask, strict=True)):
        if not trained:
            codes.append(ROLE_CODES[Role.SOLVER])
        elif math.isfinite(value) and value <= 0.0:
            codes.append(TEACHER_BASE - float(value))
        else:
            raise ValueError(f"sample {sample.index}: teacher log-prob {value!r} at response "
                             f"token {position} is not a finite log-prob (<= 0)")
    return codes


def _top_p_replay(sample: Any) -> tuple[list[int], list[int]]:
    """A sample's nucleus (ids, offsets), checked as slime/ray/rollout.py:718-730 checks it."""
    ids, offsets = sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets
    if ids is None or offsets is None:
        raise ValueError(f"sample {sample.index}: --rollout-top-p < 1 but no top-p nucleus")
    if len(offsets) != sample.response_length + 1:
        raise ValueError(f"sample {sample.index}: top-p token offsets length {len(offsets)} "
                         f"!= response length + 1 {sample.response_length + 1}")
    if int(offsets[-1]) != len(ids):
        raise ValueError(f"sample {sample.index}: top-p token offsets[-1] {int(offsets[-1])} "
                         f"!= token ids length {len(ids)}")
    return list(ids), list(offsets)


def convert_samples_to_train_data(samples: Iterable[Any], global_batch_size: int,
                                  rollout_top_p: float = 1.0) -> dict:
    """slime's train-data dict for our samples, with the role (and teacher) channel, rollout
    buckets and, when `rollout_top_p` < 1, the top-p replay."""
    flat = flatten(samples)
    raw_rewards, advantages = post_process_rewards(flat)
    roles = [SampleTag.of(sample).role for sample in flat]
    loss_masks = [_loss_mask(sample) for sample in flat]
    rollout_ids = rollout_buckets(len(flat), global_batch_size)
    mask_per_rollout: dict[int, int] = {}
    for rollout_id, mask in zip(rollout_ids, loss_masks, strict=True):
        mask_per_rollout[rollout_id] = mask_per_rollout.get(rollout_id, 0) + sum(mask)
    data = {
        "tokens": [list(sample.tokens) for sample in flat],
        "response_lengths": [sample.response_length for sample in flat],
        "rewards": advantages,
        "raw_reward": raw_rewards,
        "truncated": [int(sample.status == type(sample).Status.TRUNCATED) for sample in flat],
        "sample_indices": [sample.index for sample in flat],
        "rollout_ids": rollout_ids,
        "loss_masks": loss_masks,
        "rollout_mask_sums": [mask_per_rollout[rollout_id] for rollout_id in rollout_ids],
        "rollout_log_probs": [_log_probs(sample) for sample in flat],
        ROLE_CHANNEL_KEY: [channel_codes(sample, role, mask)
                           for role, sample, mask in zip(roles, flat, loss_masks, strict=True)],
    }
    if rollout_top_p != 1.0:
        replays = [_top_p_replay(sample) for sample in flat]
        data["rollout_top_p_token_ids"] = [ids for ids, _ in replays]
        data["rollout_top_p_token_offsets"] = [offsets for _, offsets in replays]
    return data
