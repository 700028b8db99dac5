"""The custom loss slime calls as `fn(args, batch, logits, sum_of_sample_mean)`.

Owns the glue between slime's packed micro-batch and the pure objective in `evolving_rl.losses`:
  - current log-probs and entropies come from slime's own `get_log_probs_and_entropy` (tensor-
    and context-parallel aware, at `--rollout-temperature`);
  - old log-probs are `batch["log_probs"]` (recomputed by the trainer) or, with
    `--use-rollout-logprobs`, `batch["rollout_log_probs"]`; reference log-probs are
    `batch["ref_log_probs"]` (present with `--use-kl-loss`); advantages are `batch["advantages"]`,
    i.e. our GRPO advantages broadcast per token by slime's GRPO estimator;
  - the role of every token is read from `batch["teacher_log_probs"]` (see `train_data`) and turned
    into per-token KL and entropy coefficients from our config;
  - a code >= `TEACHER_BASE` in that channel marks a student token and carries its teacher
    log-prob (`pipeline.skill_use: teacher`, docs/design.md §4.6): the micro-batch is then
    distilled as slime's `--use-opd` does (slime/backends/megatron_utils/loss.py:663-701,
    `apply_opd_kl_to_advantages`, student = the old log-probs above, which is what slime passes
    it, loss.py:729-732, 810-816), with coefficient `loss.distill_coef` on student tokens and 0
    elsewhere. A micro-batch without a student token takes the loss's path without teacher,
    unchanged. Logged under `skill_use: teacher`: `distill_kl` (the reduced sampled reverse KL
    old - teacher, 0 off student tokens: under `--calculate-per-token-loss` slime divides the
    step's sum by its trained tokens, the local trainer's definition, docs/design.md §4.6) and
    `student_token_frac`;
  - the per-token loss is reduced by slime's `sum_of_sample_mean`, which applies the loss mask and
    (with `--calculate-per-token-loss`) sums tokens so Megatron divides by the step's token count:
    a token-level mean over the mask.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from evolving_rl.config import Config
from evolving_rl.core.roles import Role
from evolving_rl.losses import per_token_policy_loss
from evolving_rl.slime_bridge import slime_api
from evolving_rl.slime_bridge.settings import LossCoefficients, role_coefficients
from evolving_rl.slime_bridge.train_data import ROLE_CHANNEL_KEY, ROLE_CODES, TEACHER_BASE

Reducer = Callable[[torch.Tensor], torch.Tensor]


def _cat(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    if not tensors:
        return torch.zeros(0, device=device)
    return torch.cat([t.to(device=device, dtype=torch.float32) for t in tensors])


@dataclass(frozen=True)
class TokenChannel:
    """The decoded channel, aligned with the concatenated log-probs: 1.0 on extractor tokens,
    1.0 on student tokens, and the teacher log-prob on student tokens (0.0 elsewhere)."""

    extractor: torch.Tensor
    student: torch.Tensor
    teacher: torch.Tensor

    @property
    def has_student(self) -> bool:
        return bool(torch.any(self.student != 0))


def decode_channel(batch: dict[str, Any], device: torch.device) -> TokenChannel:
    """The role and teacher of every token from `batch["teacher_log_probs"]` (see `train_data`)."""
    channel = batch.get(ROLE_CHANNEL_KEY)
    if channel is None:
        raise RuntimeError(
            f"batch has no '{ROLE_CHANNEL_KEY}' role channel: run slime with "
            "--custom-convert-samples-to-train-data-path "
            "evolving_rl.slime_hooks.convert_samples_to_train_data and without --use-opd")
    codes = _cat(channel, device)
    extractor = codes == ROLE_CODES[Role.EXTRACTOR]
    student = codes >= TEACHER_BASE
    if not bool(torch.all(extractor | student | (codes == ROLE_CODES[Role.SOLVER]))):
        raise RuntimeError(f"'{ROLE_CHANNEL_KEY}' holds values that are neither role codes nor "
                           f"teacher codes (>= {TEACHER_BASE})")
    teacher = torch.where(student, TEACHER_BASE - codes, torch.zeros_like(codes))
    return TokenChannel(extractor.float(), student.float(), teacher)


def per_token_coefficients(extractor: torch.Tensor, table: dict[Role, LossCoefficients],
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """(KL coefficient, entropy coefficient) per token from the role mask."""
    solver, ext = table[Role.SOLVER], table[Role.EXTRACTOR]
    kl = solver.kl + extractor * (ext.kl - solver.kl)
    entropy = solver.entropy + extractor * (ext.entropy - solver.entropy)
    return kl, entropy


def _old_log_probs(args: Namespace, batch: dict[str, Any]) -> list[torch.Tensor]:
    key = "rollout_log_probs" if args.use_rollout_logprobs else "log_probs"
    old = batch.get(key)
    if not old:
        raise RuntimeError(f"batch has no '{key}' for the PPO ratio")
    return old


def custom_policy_loss(args: Namespace, batch: dict[str, Any], logits: torch.Tensor,
                       sum_of_sample_mean: Reducer, config: Config,
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip + per-role KL and entropy, and on student tokens on-policy distillation, on one
    slime micro-batch: (loss, detached metrics)."""
    table = role_coefficients(config)
    log_prob_list, entropy_list = slime_api.log_probs_and_entropy(args, batch, logits)
    device = logits.device
    log_probs = _cat(log_prob_list, device)
    channel = decode_channel(batch, device)
    extractor = channel.extractor
    kl_coef, entropy_coef = per_token_coefficients(extractor, table)
    needs_ref = any(c.kl != 0 for c in table.values())
    teaching = config.pipeline.skill_use == "teacher"
    distill: dict[str, Any] = {}
    if channel.has_student:
        if not teaching:
            raise RuntimeError(f"'{ROLE_CHANNEL_KEY}' carries teacher codes, but the config's "
                               "pipeline.skill_use is not teacher")
        distill = {"teacher_log_probs": channel.teacher,
                   "distill_coef": config.loss.distill_coef * channel.student}
    terms = per_token_policy_loss(
        log_probs=log_probs,
        old_log_probs=_cat(_old_log_probs(args, batch), device),
        advantages=_cat(batch["advantages"], device),
        eps_low=config.loss.clip_eps_low, eps_high=config.loss.clip_eps_high,
        ref_log_probs=_cat(batch["ref_log_probs"], device) if needs_ref else None,
        kl_coef=kl_coef, entropy=_cat(entropy_list, device), entropy_coef=entropy_coef,
        **distill)
    loss = sum_of_sample_mean(terms.loss)
    if log_probs.numel() == 0:
        loss = loss + 0 * logits.sum()  # keep the graph connected on an empty micro-batch
    metrics = {
        "loss": loss, "pg_loss": sum_of_sample_mean(terms.pg),
        "kl_loss": sum_of_sample_mean(terms.kl), "entropy_loss": sum_of_sample_mean(terms.entropy),
        "pg_clipfrac": sum_of_sample_mean(terms.clipped),
        "extractor_token_frac": sum_of_sample_mean(extractor),
        "extractor_kl_loss": sum_of_sample_mean(terms.kl * extractor),
        "extractor_entropy_loss": sum_of_sample_mean(terms.entropy * extractor),
    }
    if teaching:
        metrics |= {"distill_kl": sum_of_sample_mean(terms.reverse_kl),
                    "student_token_frac": sum_of_sample_mean(channel.student)}
    return loss, {name: value.clone().detach() for name, value in metrics.items()}
