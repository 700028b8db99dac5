"""The teacher switch's objective (docs/design.md §4.6) in the local backend: the distillation
term's gradient against finite differences, the switch off equal to today's loss bit for bit, the
trainer's distillation metrics, and `LocalPolicy.score` against the trainer's log-probs."""

from __future__ import annotations

import asyncio
import copy
import dataclasses

import pytest
import torch
from local_helpers import PAD_ID, local_policy, make_sample, tiny_llama

from evolving_rl.clients.policy import SamplingParams
from evolving_rl.core.roles import Role
from evolving_rl.local import trainer as trainer_module
from evolving_rl.local.trainer import GRPOTrainer, build_token_batch, token_log_probs
from evolving_rl.losses import per_token_policy_loss

BETA = 0.7


def _distill_loss(log_probs, old, teacher, coef=BETA):
    terms = per_token_policy_loss(log_probs=log_probs, old_log_probs=old,
                                  advantages=torch.zeros_like(old), eps_low=0.2, eps_high=0.2,
                                  teacher_log_probs=teacher, distill_coef=coef)
    return terms.loss


def test_expected_distill_gradient_is_the_exact_reverse_kl_gradient():
    """Σ_y π(y) ∇loss(y) at θ = θ_old equals β ∇KL(π_θ || π_T), the latter by central finite
    differences of the exact KL of a softmax policy over 6 tokens."""
    gen = torch.Generator().manual_seed(3)
    weights = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    x = torch.randn(4, generator=gen, dtype=torch.float64)
    teacher = torch.log_softmax(torch.randn(6, generator=gen, dtype=torch.float64), dim=0)

    def kl(w):
        log_p = torch.log_softmax(w @ x, dim=0)
        return float(BETA * (log_p.exp() * (log_p - teacher)).sum())

    w = weights.clone().requires_grad_(True)
    log_p = torch.log_softmax(w @ x, dim=0)
    expected_loss = (log_p.detach().exp() * _distill_loss(log_p, log_p.detach(), teacher)).sum()
    expected_loss.backward()
    h = 1e-6
    finite = torch.zeros_like(weights)
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            up, down = weights.clone(), weights.clone()
            up[i, j] += h
            down[i, j] -= h
            finite[i, j] = (kl(up) - kl(down)) / (2 * h)
    assert torch.allclose(w.grad, finite, rtol=1e-4, atol=1e-6)


def _student(seed: int, coef_shift: float = 0.3):
    sample = make_sample(Role.SOLVER, 5, 8, 0.4, seed=seed, masked_every=3)
    teacher = [(lp + coef_shift * ((j % 4) - 1.5)) if m else 0.0
               for j, (lp, m) in enumerate(zip(sample.log_probs, sample.loss_mask, strict=True))]
    return dataclasses.replace(sample, teacher_log_probs=teacher)


def _surrogate(model, samples, loss_cfg):
    """The token-summed objective in float64 (old and teacher log-probs held fixed)."""
    batch = build_token_batch(samples, loss_cfg, PAD_ID, "cpu")
    log_probs, _ = token_log_probs(model, batch)
    loss = per_token_policy_loss(
        log_probs=log_probs.double(), old_log_probs=batch.old_log_probs.double(),
        advantages=batch.advantages.double(), eps_low=0.2, eps_high=0.2,
        teacher_log_probs=batch.teacher.double(), distill_coef=batch.distill_coef.double())
    return loss.loss.sum()


def _on_policy(model, sample, loss_cfg):
    """`sample` with the model's own log-probs as the sampled ones (ratio 1 at the start)."""
    batch = build_token_batch([sample], loss_cfg, PAD_ID, "cpu")
    with torch.no_grad():
        own = iter(token_log_probs(model, batch)[0].tolist())
    old = [next(own) if m else 0.0 for m in sample.loss_mask]
    teacher = [o + (t - s) if m else 0.0 for o, t, s, m in zip(
        old, sample.teacher_log_probs, sample.log_probs, sample.loss_mask, strict=True)]
    return dataclasses.replace(sample, log_probs=old, teacher_log_probs=teacher)


def test_distill_gradient_through_a_tiny_model_matches_finite_differences(loss_cfg):
    model = tiny_llama(1).double()
    samples = [_on_policy(model, _student(seed), loss_cfg) for seed in (1, 2)]
    loss = _surrogate(model, samples, loss_cfg)
    loss.backward()
    param = model.model.layers[0].mlp.up_proj.weight
    # the five largest components; h = 1e-3 because the model's RMSNorm computes in float32
    # even in a float64 model (rounding ~1e-7 / h), the O(h^2) truncation is far below that
    top = torch.topk(param.grad.abs().flatten(), 5).indices.tolist()
    for flat in top:
        i, j = divmod(flat, param.shape[1])
        h = 1e-3
        with torch.no_grad():
            param[i, j] += h
            up = float(_surrogate(model, samples, loss_cfg))
            param[i, j] -= 2 * h
            down = float(_surrogate(model, samples, loss_cfg))
            param[i, j] += h
        assert float(param.grad[i, j]) == pytest.approx((up - down) / (2 * h), rel=1e-2)


def test_without_teacher_the_loss_is_todays_bit_for_bit(loss_cfg, local_cfg, batch,
                                                          monkeypatch):
    """No student in the batch: a trainer with a distillation coefficient and one without give
    the same loss and gradient bits, through `per_token_policy_loss` calls without a teacher
    (a spy records them, as tests/slime/test_teacher_channel.py does on the slime path)."""
    assert all(s.teacher_log_probs is None for s in batch)
    calls = []

    def spy(**kwargs):
        calls.append(kwargs)
        return per_token_policy_loss(**kwargs)

    monkeypatch.setattr(trainer_module, "per_token_policy_loss", spy)
    results = []
    for coef in (0.0, BETA):
        model = tiny_llama(0)
        trainer = GRPOTrainer(model, copy.deepcopy(model), dataclasses.replace(
            loss_cfg, distill_coef=coef), local_cfg, pad_id=PAD_ID)
        trainer.model.train()
        loss = trainer._accumulate(trainer.micro_batches(batch), backward=True)["loss"]
        results.append((loss, [p.grad.clone() for p in model.parameters()]))
    assert calls and all(c["teacher_log_probs"] is None and c["distill_coef"] == 0.0
                         for c in calls)
    (loss_off, grads_off), (loss_on, grads_on) = results
    assert loss_off == loss_on
    assert all(torch.equal(a, b) for a, b in zip(grads_off, grads_on, strict=True))


def test_a_zero_distill_coefficient_changes_nothing(loss_cfg, local_cfg):
    students = [_student(3), _student(4)]
    plain = [dataclasses.replace(s, teacher_log_probs=None) for s in students]
    model = tiny_llama(0)
    off = dataclasses.replace(loss_cfg, distill_coef=0.0, kl_coef=loss_cfg.kl_coef)
    trainer = GRPOTrainer(model, copy.deepcopy(model), off, local_cfg, pad_id=PAD_ID)
    a, b = trainer.evaluate_loss(students), trainer.evaluate_loss(plain)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-7)


def test_trainer_reports_the_sampled_reverse_kl_over_every_trained_token(loss_cfg, local_cfg,
                                                                         batch):
    students = [_student(5), _student(6)]
    model = tiny_llama(0)
    trainer = GRPOTrainer(model, copy.deepcopy(model), loss_cfg, local_cfg, pad_id=PAD_ID)
    metrics = trainer.step(batch + students)
    diffs = [o - t for s in students
             for o, t, m in zip(s.log_probs, s.teacher_log_probs, s.loss_mask, strict=True) if m]
    assert metrics.teacher_tokens == len(diffs)
    trained = sum(sum(s.loss_mask) for s in batch + students)
    assert metrics.distill_kl == pytest.approx(sum(diffs) / trained, abs=1e-5)


def test_distillation_raises_the_tokens_the_teacher_prefers(loss_cfg, local_cfg):
    """With zero GRPO advantage, a step moves the student's log-probs toward the teacher's:
    tokens the teacher rates above the sampled log-prob gain, the others lose."""
    sample = make_sample(Role.SOLVER, 4, 6, 0.0, seed=9)
    model = tiny_llama(0)
    batch = build_token_batch([sample], loss_cfg, PAD_ID, "cpu")
    with torch.no_grad():
        old = token_log_probs(model, batch)[0].tolist()
    shift = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0]
    teacher = [o + d for o, d in zip(old, shift, strict=True)]
    student = dataclasses.replace(sample, log_probs=old, teacher_log_probs=teacher)
    cfg = dataclasses.replace(loss_cfg, lr=1e-2)
    trainer = GRPOTrainer(model, copy.deepcopy(model), cfg, local_cfg, pad_id=PAD_ID)
    trainer.step([student])
    with torch.no_grad():
        new = token_log_probs(model, batch)[0].tolist()
    moved = [n - o for n, o in zip(new, old, strict=True)]
    assert sum(m for m, d in zip(moved, shift, strict=True) if d > 0) > 0
    assert sum(m for m, d in zip(moved, shift, strict=True) if d < 0) < 0


def test_local_policy_score_is_the_trainers_log_probs(tokenizer, loss_cfg):
    model = tiny_llama(0)
    policy = local_policy(model, tokenizer, max_batch_generate=4, batch_window_s=0.0,
                          decode_backend="dynamic")
    prompt = [5, 9, 14, 3, 22, 7]

    async def run():
        sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=8)
        generation = await policy.generate(prompt, sampling)
        ids = prompt + list(generation.token_ids)
        scored = await policy.score(ids, len(prompt))
        await policy.close()
        return generation, scored

    generation, scored = asyncio.run(run())
    assert scored == pytest.approx(list(generation.log_probs), abs=1e-4)
    sample = dataclasses.replace(make_sample(Role.SOLVER, 1, 1, 0.0, seed=0),
                                 prompt_ids=prompt, response_ids=list(generation.token_ids),
                                 loss_mask=[1] * len(scored), log_probs=scored)
    batch = build_token_batch([sample], loss_cfg, PAD_ID, "cpu")
    with torch.no_grad():
        expected = token_log_probs(model, batch)[0].tolist()
    assert scored == pytest.approx(expected, abs=1e-5)
