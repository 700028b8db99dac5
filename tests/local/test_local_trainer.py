"""The local GRPO trainer: loss decreases, role coefficients, accumulation, resume, determinism."""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys

import pytest
import torch
from local_helpers import PAD_ID, make_sample, tiny_llama

from evolving_rl.config.schema import RoleCoefficients
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus
from evolving_rl.local.model import load_model
from evolving_rl.local.trainer import GRPOTrainer, build_token_batch, token_log_probs


def _trainer(loss_cfg, local_cfg, seed: int = 0, ref_shift: float = 0.0) -> GRPOTrainer:
    model = tiny_llama(seed)
    ref = copy.deepcopy(model).requires_grad_(False)
    if ref_shift:
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(ref_shift * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))
    return GRPOTrainer(model, ref, loss_cfg, local_cfg, pad_id=PAD_ID)


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_one_step_lowers_the_loss(loss_cfg, local_cfg, batch):
    trainer = _trainer(loss_cfg, local_cfg)
    before = trainer.evaluate_loss(batch)["loss"]
    metrics = trainer.step(batch)
    after = trainer.evaluate_loss(batch)["loss"]
    assert metrics.loss == pytest.approx(before, abs=1e-5)
    assert after < before - 1e-4
    assert metrics.n_samples == len(batch) and metrics.grad_norm > 0


def test_role_coefficients_reach_the_loss(loss_cfg, local_cfg):
    loss_cfg = dataclasses.replace(loss_cfg, kl_coef=RoleCoefficients(solver=0.0, extractor=0.5),
                                   entropy_coef=RoleCoefficients(solver=0.0, extractor=0.2))
    trainer = _trainer(loss_cfg, local_cfg, ref_shift=0.5)
    solver = [make_sample(Role.SOLVER, 4, 6, 1.0, seed=1)]
    extractor = [dataclasses.replace(solver[0], role=Role.EXTRACTOR)]
    s, e = trainer.evaluate_loss(solver), trainer.evaluate_loss(extractor)
    assert s["kl"] > 1e-3 and s["entropy"] > 0  # same tokens: same terms, different coefficients
    assert s["kl"] == pytest.approx(e["kl"]) and s["pg"] == pytest.approx(e["pg"])
    assert s["loss"] == pytest.approx(s["pg"], abs=1e-6)
    assert e["loss"] == pytest.approx(e["pg"] + 0.5 * e["kl"] - 0.2 * e["entropy"], abs=1e-6)
    mixed = trainer.evaluate_loss(solver + extractor)
    assert mixed["loss"] == pytest.approx((s["loss"] + e["loss"]) / 2, abs=1e-6)
    assert mixed["tokens/solver"] == mixed["tokens/extractor"] == 6


def test_accumulation_matches_one_big_batch(loss_cfg, local_cfg, batch):
    """Micro-batches accumulate the big batch's gradient, seen through a plain SGD step (lr 1):
    AdamW's first step divides each gradient by its own size, which would blow last-bit
    differences of a near-zero gradient (two GEMM shapes) up to the order of lr."""
    small = _trainer(loss_cfg, local_cfg)
    big = _trainer(loss_cfg, dataclasses.replace(local_cfg, micro_batch_size=len(batch)))
    for trainer in (small, big):
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
        trainer.step(batch)
    for a, b in zip(_params(small.model), _params(big.model), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_untrainable_samples_are_skipped(loss_cfg, local_cfg, batch):
    trainer = _trainer(loss_cfg, local_cfg)
    failed = dataclasses.replace(batch[0], status=SampleStatus.ENV_ERROR)
    empty = dataclasses.replace(batch[1], loss_mask=[0] * len(batch[1].response_ids))
    assert trainer.evaluate_loss([failed, empty, batch[2]]) == trainer.evaluate_loss([batch[2]])
    metrics = trainer.step([failed, empty])
    assert metrics.n_samples == 0 and trainer.step_count == 1


def test_same_seed_same_weights(loss_cfg, local_cfg, batch):
    runs = []
    for _ in range(2):
        trainer = _trainer(loss_cfg, local_cfg, seed=3)
        losses = [trainer.step(batch).loss for _ in range(2)]
        runs.append((losses, _params(trainer.model)))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        assert torch.equal(a, b)


def test_checkpoint_resume_gives_the_same_next_step(loss_cfg, local_cfg, batch, tmp_path):
    first, second = batch[:3], batch[3:]
    trainer = _trainer(loss_cfg, local_cfg)
    trainer.step(first)
    trainer.save(tmp_path / "ckpt")
    expected = trainer.step(second)
    resumed = GRPOTrainer(load_model(tmp_path / "ckpt"), trainer.ref_model, loss_cfg, local_cfg,
                          pad_id=PAD_ID)
    resumed.load_state(tmp_path / "ckpt")
    got = resumed.step(second)
    assert got.step == expected.step == 2
    assert got.loss == expected.loss and got.grad_norm == expected.grad_norm
    for a, b in zip(_params(trainer.model), _params(resumed.model), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_without_trainer_state_is_smaller_and_resumes_the_step_count(
        loss_cfg, local_cfg, batch, tmp_path, caplog):
    trainer = _trainer(loss_cfg, local_cfg)
    trainer.step(batch)
    full = trainer.save(tmp_path / "full") / "trainer_state.pt"
    trainer.local_cfg = dataclasses.replace(local_cfg, save_trainer_state=False)
    light = trainer.save(tmp_path / "light") / "trainer_state.pt"
    assert light.stat().st_size * 10 < full.stat().st_size
    resumed = GRPOTrainer(load_model(tmp_path / "light"), trainer.ref_model, loss_cfg, local_cfg,
                          pad_id=PAD_ID)
    with caplog.at_level("WARNING"):
        resumed.load_state(tmp_path / "light")
    assert resumed.step_count == 1 and "no optimiser state" in caplog.text
    assert resumed.step(batch).step == 2


def test_gradient_checkpointing_gives_the_same_step(loss_cfg, local_cfg, batch):
    plain = _trainer(loss_cfg, local_cfg)
    ckpt = _trainer(loss_cfg, dataclasses.replace(local_cfg, gradient_checkpointing=True))
    assert plain.step(batch).loss == pytest.approx(ckpt.step(batch).loss, abs=1e-6)
    for a, b in zip(_params(plain.model), _params(ckpt.model), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_token_log_probs_match_a_full_forward(loss_cfg, batch):
    model = tiny_llama()
    tokens = build_token_batch(batch, loss_cfg, PAD_ID, "cpu")
    with torch.no_grad():
        got, _ = token_log_probs(model, tokens)
        logits = model(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).logits
    full = torch.log_softmax(logits.float(), -1)[tokens.rows, tokens.cols - 1]
    expected = full.gather(1, tokens.targets[:, None])[:, 0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert tokens.n_tokens == sum(sum(s.loss_mask) for s in batch)


def test_chunked_output_layer_gives_the_same_step(loss_cfg, local_cfg, batch):
    """Output layer over 3 trained tokens at a time (checkpointed) vs all at once: the same
    terms and, through a plain SGD step (lr 1), the same gradients up to float rounding."""
    runs = []
    for chunk in (0, 3):
        trainer = _trainer(loss_cfg, dataclasses.replace(local_cfg, logit_chunk_tokens=chunk),
                           ref_shift=0.5)
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
        assert all(b.n_tokens > chunk for b in trainer.micro_batches(batch))  # several chunks
        runs.append((trainer.step(batch), _params(trainer.model)))
    (whole, whole_params), (chunked, chunked_params) = runs
    for name in ("loss", "pg", "kl", "entropy", "grad_norm"):
        assert getattr(chunked, name) == pytest.approx(getattr(whole, name), rel=1e-5, abs=1e-7)
    assert whole.kl > 1e-3 and whole.entropy > 0
    for a, b in zip(whole_params, chunked_params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_chunked_token_log_probs_without_gradients(loss_cfg, batch):
    model = tiny_llama()
    tokens = build_token_batch(batch, loss_cfg, PAD_ID, "cpu")
    with torch.no_grad():
        whole = token_log_probs(model, tokens, with_entropy=True)
        chunked = token_log_probs(model, tokens, with_entropy=True, chunk_tokens=5)
    assert tokens.n_tokens % 5 != 0  # a short last chunk
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


HEAP_HOLES = """
import sys, psutil, torch
from evolving_rl.local.trainer import release_freed_memory
if sys.argv[1] == "release":
    assert release_freed_memory()
torch.ones(4 << 20)  # a freed 16 MB block lifts glibc's adaptive mmap threshold above 1 MB
tensors = [torch.ones(1 << 18) for _ in range(256)]
held = psutil.Process().memory_info().rss
del tensors[::2]  # 128 MB freed between live blocks
print((held - psutil.Process().memory_info().rss) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap behaviour")
def test_release_freed_memory_unmaps_freed_tensors():
    """Freed 1 MB tensors between live ones stay resident by default (heap holes), and go back
    to the OS at once with a fixed mmap threshold."""
    returned = {mode: int(subprocess.run(
        [sys.executable, "-c", HEAP_HOLES, mode], capture_output=True, text=True, check=True,
        timeout=120).stdout) for mode in ("default", "release")}
    assert returned["default"] < 32 and returned["release"] > 100, returned


@pytest.mark.parametrize("master", [False, True])
def test_a_non_finite_gradient_skips_the_update_and_the_next_step_applies(loss_cfg, local_cfg,
                                                                          batch, master):
    model = tiny_llama().to(torch.bfloat16 if master else torch.float32)
    trainer = GRPOTrainer(model, copy.deepcopy(model).requires_grad_(False), loss_cfg,
                          dataclasses.replace(local_cfg, master_weights=master), pad_id=PAD_ID)
    before = [p.detach().clone() for p in model.parameters()]
    poison = next(model.parameters()).register_hook(lambda grad: grad * float("nan"))
    skipped = trainer.step(batch)
    poison.remove()
    assert skipped.skipped and not math.isfinite(skipped.grad_norm)
    assert all(torch.equal(a, p.detach()) for a, p in zip(before, model.parameters(),
                                                          strict=True))
    assert all(p.grad is None for p in trainer.optimized)
    applied = trainer.step(batch)
    assert not applied.skipped and math.isfinite(applied.grad_norm)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters(),
                                                              strict=True))


def test_the_step_reports_its_largest_log_ratio_and_a_skip_names_it(loss_cfg, local_cfg, batch,
                                                                    caplog):
    """`max_log_ratio` is the PPO ratio's largest exponent (new - old log-prob). Past ~88 it
    overflows float32: a token with a positive advantage then gives a finite loss and a NaN
    gradient, and the skipped step's warning says how large the exponent was."""
    trainer = _trainer(loss_cfg, local_cfg)
    calm = trainer.step(batch)
    assert 0 < calm.max_log_ratio < 20  # the samples' old log-probs are about -4
    first = batch[0]  # a solver sample with advantage +1
    token = first.loss_mask.index(1)
    old = list(first.log_probs)
    old[token] = -200.0  # a sampler log-prob far below the trainer's
    poisoned = [dataclasses.replace(first, log_probs=old), *batch[1:]]
    with caplog.at_level("WARNING", logger="evolving_rl.local.trainer"):
        metrics = trainer.step(poisoned)
    assert metrics.max_log_ratio > 150
    assert metrics.skipped and math.isfinite(metrics.loss)
    assert "largest new - old log-prob of a trained token" in caplog.text
