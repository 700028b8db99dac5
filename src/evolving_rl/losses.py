"""Pure torch math of the policy loss, shared by the slime path and the local trainer.

Owns the per-token objective of docs/design.md §4.5, with no knowledge of slime, Megatron or
batching:

    loss_t = pg_t + kl_coef_t * kl_t - entropy_coef_t * entropy_t
    pg_t   = max(-r_t * A_t, -clip(r_t, 1 - eps_low, 1 + eps_high) * A_t),  r_t = exp(logp - old)
    kl_t   = exp(ref - logp) - 1 - (ref - logp)    (k3 / "low_var_kl", clamped to [-10, 10])
    A_t   += distill_coef_t * (teacher_t - old_t)   (only with teacher log-probs: on-policy
                                                   distillation, docs/design.md §4.6)

Coefficients are per token so that one batch can mix roles (solver and extractor) with their own
KL and entropy coefficients; a Python float broadcasts. A positive entropy coefficient rewards
entropy (slime's sign convention: `loss = pg - entropy_coef * entropy`), so the reference
extractor value -0.03 sharpens the extractor. Role weights are already folded into the
advantages by the pipeline. Reduction is the caller's: the slime path uses slime's own reducer,
the local trainer a token mean over the whole rollout's loss mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_CLAMP = 10.0
LOG_RATIO_CAP = 20.0  # exp(20) - 21 > KL_CLAMP: the cap changes no value (low_var_kl)

Coefficient = torch.Tensor | float


def _wide(tensor: torch.Tensor) -> torch.Tensor:
    """float32 (what both backends compute the objective in), or float64 kept as float64 (the
    finite-difference tests)."""
    return tensor if tensor.dtype == torch.float64 else tensor.float()


@dataclass(frozen=True)
class TokenLoss:
    """Per-token terms of the objective, all shaped like the log-probs."""

    loss: torch.Tensor
    pg: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clipped: torch.Tensor  # 1.0 where the clipped branch was taken, else 0.0
    ratio: torch.Tensor
    reverse_kl: torch.Tensor  # old - teacher on distilled tokens, else 0.0


def low_var_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Non-negative, unbiased k3 estimate of KL(policy || reference) per token, clamped.

    The values are slime's (`slime/utils/ppo_utils.py` compute_approx_kl, low_var_kl: exp, then
    the clamp to [-10, 10]) wherever those are finite. The log-ratio is first capped at
    `LOG_RATIO_CAP`, above which the clamp holds the value at 10 anyway: without the cap a ratio
    over ~88 overflows exp to inf in float32, and the clamp's zero gradient times that inf makes
    the whole step's gradient NaN."""
    log_ratio = (_wide(ref_log_probs) - _wide(log_probs)).clamp(max=LOG_RATIO_CAP)
    kl = log_ratio.exp() - 1.0 - log_ratio
    return kl.clamp(min=-KL_CLAMP, max=KL_CLAMP)


def distill_advantages(advantages: torch.Tensor, old_log_probs: torch.Tensor,
                       teacher_log_probs: torch.Tensor, distill_coef: Coefficient,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy distillation folded into the advantages, as slime's `--use-opd` folds it
    (slime/backends/megatron_utils/loss.py `apply_opd_kl_to_advantages`): A + coef * (teacher -
    old) per token, and the sampled reverse KL old - teacher. A token with coefficient 0 keeps
    its advantage and reports no KL (its teacher value is never read, it may be anything finite).
    """
    coef = torch.as_tensor(distill_coef, device=advantages.device)
    on = coef != 0
    reverse_kl = torch.where(on, _wide(old_log_probs) - _wide(teacher_log_probs),
                             torch.zeros_like(_wide(advantages)))
    return advantages - coef * reverse_kl, reverse_kl


def ppo_clip(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
             eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO-clip surrogate per token with asymmetric bounds: (loss, clipped indicator, ratio)."""
    if not (0.0 < eps_low < 1.0 and eps_high > 0.0):
        raise ValueError(f"need 0 < eps_low < 1 and eps_high > 0, got {eps_low}, {eps_high}")
    ratio = (_wide(log_probs) - _wide(old_log_probs)).exp()
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float(), ratio


def per_token_policy_loss(
    *,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: float,
    ref_log_probs: torch.Tensor | None = None,
    kl_coef: Coefficient = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: Coefficient = 0.0,
    teacher_log_probs: torch.Tensor | None = None,
    distill_coef: Coefficient = 0.0,
) -> TokenLoss:
    """All terms per token; a KL, entropy or distillation term needs its tensor unless its
    coefficient is 0. Without teacher log-probs the advantages are used as given."""
    if teacher_log_probs is None:
        _require_zero(distill_coef, "distill_coef", "teacher_log_probs")
        reverse_kl = None
    else:
        advantages, reverse_kl = distill_advantages(advantages, old_log_probs,
                                                    teacher_log_probs, distill_coef)
    pg, clipped, ratio = ppo_clip(log_probs, old_log_probs, advantages, eps_low, eps_high)
    zeros = torch.zeros_like(pg)
    if ref_log_probs is None:
        _require_zero(kl_coef, "kl_coef", "ref_log_probs")
        kl = zeros
    else:
        kl = low_var_kl(log_probs, ref_log_probs)
    if entropy is None:
        _require_zero(entropy_coef, "entropy_coef", "entropy")
        entropy = zeros
    loss = pg + kl_coef * kl - entropy_coef * entropy
    return TokenLoss(loss=loss, pg=pg, kl=kl, entropy=entropy, clipped=clipped, ratio=ratio,
                     reverse_kl=zeros if reverse_kl is None else reverse_kl)


def _require_zero(coef: Coefficient, name: str, needed: str) -> None:
    nonzero = bool(torch.any(coef != 0)) if isinstance(coef, torch.Tensor) else coef != 0
    if nonzero:
        raise ValueError(f"{name} is non-zero but no {needed} was given")
