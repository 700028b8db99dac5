"""The pure loss math (`evolving_rl.losses`) against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from evolving_rl.losses import KL_CLAMP, low_var_kl, per_token_policy_loss, ppo_clip

EPS_LOW, EPS_HIGH = 0.1, 0.15


def _lp(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_ppo_clip_both_sides_and_asymmetric_bounds():
    ratios = [1.3, 0.8, 1.3, 0.8, 1.05]
    advantages = torch.tensor([1.0, -1.0, -1.0, 1.0, 2.0])
    old = torch.zeros(5)
    log_probs = torch.log(torch.tensor(ratios))
    loss, clipped, ratio = ppo_clip(log_probs, old, advantages, EPS_LOW, EPS_HIGH)
    # A>0 above 1+0.15: clipped to -1.15; A<0 below 1-0.1: clipped to 0.9;
    # A<0 above: unclipped 1.3; A>0 below: unclipped -0.8; inside the range: -1.05 * 2.
    expected = [-1.15, 0.9, 1.3, -0.8, -2.1]
    assert loss.tolist() == pytest.approx(expected, abs=1e-6)
    assert clipped.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert ratio.tolist() == pytest.approx(ratios, abs=1e-6)


def test_ppo_clip_rejects_bad_bounds():
    with pytest.raises(ValueError):
        ppo_clip(_lp(0.0), _lp(0.0), _lp(1.0), 1.5, 0.1)


def test_low_var_kl_matches_k3_and_is_clamped():
    kl = low_var_kl(torch.log(_lp(0.5, 0.3)), torch.log(_lp(0.25, 0.3)))
    assert kl[0].item() == pytest.approx(0.5 - 1 - math.log(0.5), abs=1e-6)
    assert kl[1].item() == pytest.approx(0.0, abs=1e-7)
    assert low_var_kl(_lp(-30.0), _lp(0.0)).item() == KL_CLAMP


def test_low_var_kl_gradient_stays_finite_where_the_ratio_overflows_exp():
    # ref - logp of 100 (and +inf) overflows exp in float32; the value is the clamp's either way
    log_probs = torch.tensor([-100.0, -float("inf"), -1.0, -30.0], requires_grad=True)
    ref = torch.tensor([0.0, -1.0, -1.2, -5.0])
    kl = low_var_kl(log_probs, ref)
    assert kl[0].item() == kl[1].item() == KL_CLAMP == kl[3].item()
    log_ratio = (ref[2] + 1.0).item()
    assert kl[2].item() == pytest.approx(math.exp(log_ratio) - 1 - log_ratio)
    kl.sum().backward()
    assert torch.isfinite(log_probs.grad).all()
    assert log_probs.grad[0].item() == log_probs.grad[3].item() == 0.0  # clamped: no gradient


def test_kl_and_entropy_terms_with_per_token_coefficients():
    log_probs = torch.log(_lp(0.5, 0.5))
    terms = per_token_policy_loss(
        log_probs=log_probs, old_log_probs=log_probs.clone(), advantages=_lp(1.0, 1.0),
        eps_low=EPS_LOW, eps_high=EPS_HIGH, ref_log_probs=torch.log(_lp(0.25, 0.25)),
        kl_coef=_lp(0.01, 0.2), entropy=_lp(2.0, 2.0), entropy_coef=_lp(0.0, -0.03))
    k3 = 0.5 - 1 - math.log(0.5)
    # ratio 1 → pg = -A; token 0: solver coefficients, token 1: extractor coefficients.
    assert terms.loss.tolist() == pytest.approx(
        [-1.0 + 0.01 * k3 - 0.0, -1.0 + 0.2 * k3 + 0.03 * 2.0], abs=1e-6)
    assert terms.kl.tolist() == pytest.approx([k3, k3], abs=1e-6)


def test_nonzero_coefficient_without_its_tensor_is_an_error():
    lp = _lp(-1.0)
    with pytest.raises(ValueError, match="kl_coef"):
        per_token_policy_loss(log_probs=lp, old_log_probs=lp, advantages=lp, eps_low=EPS_LOW,
                              eps_high=EPS_HIGH, kl_coef=0.01)
    with pytest.raises(ValueError, match="entropy_coef"):
        per_token_policy_loss(log_probs=lp, old_log_probs=lp, advantages=lp, eps_low=EPS_LOW,
                              eps_high=EPS_HIGH, entropy_coef=_lp(-0.03))
