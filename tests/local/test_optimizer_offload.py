"""`local.optimizer_device: cpu`: float32 masters and AdamW's state in CPU memory step the model
as the on-device optimiser does, and a checkpoint resumes them.

On a CPU both devices are the CPU, so the tests check the offload path's own objects: masters
that are copies (never the model's tensors), the optimiser's state on them, the per-parameter
step through the staging buffers, the clipping it does itself. With a GPU (`-m gpu`), the
equivalence test also runs with the model there and a pinned staging buffer.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from local_helpers import PAD_ID, tiny_qwen2

from evolving_rl.local.master_weights import OffloadedMasters
from evolving_rl.local.model import load_model
from evolving_rl.local.trainer import GRPOTrainer

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, CUDA])]


def _trainers(loss_cfg, local_cfg, dtype: torch.dtype = torch.bfloat16, device: str = "cpu"):
    """An on-device trainer and an offloaded one over two identical models."""
    model = tiny_qwen2(tied=False).to(device, dtype)
    ref = copy.deepcopy(model).requires_grad_(False)
    return tuple(GRPOTrainer(copy.deepcopy(model), ref, loss_cfg,
                             dataclasses.replace(local_cfg, optimizer_device=device),
                             pad_id=PAD_ID) for device in ("model", "cpu"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad_clip", [100.0, 1e-3], ids=["unclipped", "clipped"])
def test_an_offloaded_step_updates_the_weights_as_the_on_device_one(loss_cfg, local_cfg, batch,
                                                                     grad_clip, device):
    on_device, offloaded = _trainers(dataclasses.replace(loss_cfg, grad_clip=grad_clip),
                                     local_cfg, device=device)
    assert offloaded.masters._staging.is_pinned() == (device == "cuda")
    before = [p.detach().clone() for p in offloaded.model.parameters()]
    for samples in (batch[:3], batch[3:]):
        expected, got = on_device.step(samples), offloaded.step(samples)
        assert got.grad_norm == pytest.approx(expected.grad_norm, rel=1e-5)
    assert (expected.grad_norm > grad_clip) == (grad_clip < 1.0)  # only "clipped" clips
    for a, b in zip(on_device.masters.masters, offloaded.masters.masters, strict=True):
        torch.testing.assert_close(b, a.cpu(), rtol=1e-5, atol=1e-7)
    for a, b in zip(on_device.model.parameters(), offloaded.model.parameters(), strict=True):
        torch.testing.assert_close(b, a)  # bf16 tolerances: a rounding may differ by one spacing
    moved = sum(int((a != b.detach()).sum()) for a, b in zip(
        before, offloaded.model.parameters(), strict=True))
    assert moved > 0.5 * sum(a.numel() for a in before)


def test_the_offloaded_optimiser_owns_copies(loss_cfg, local_cfg, batch):
    _, offloaded = _trainers(loss_cfg, local_cfg, dtype=torch.float32)  # masters even in fp32
    offloaded.step(batch)
    masters = offloaded.masters
    assert isinstance(masters, OffloadedMasters)
    assert offloaded.optimizer.defaults["fused"]
    for param, master in zip(masters.params, masters.masters, strict=True):
        assert master.device.type == "cpu" and master.dtype == torch.float32
        assert master.data_ptr() != param.data_ptr()
        assert param.grad is None and master.grad is None
        assert torch.equal(param.detach(), master)
        state = offloaded.optimizer.state[master]
        assert state["exp_avg"].device.type == "cpu" and int(state["step"]) == 1


def test_a_non_finite_norm_steps_nothing(loss_cfg, local_cfg, batch):
    _, offloaded = _trainers(loss_cfg, local_cfg)
    before = [p.detach().clone() for p in offloaded.model.parameters()]
    metrics = offloaded.step([dataclasses.replace(batch[0], advantage=float("nan")), *batch[1:]])
    assert metrics.skipped and not offloaded.optimizer.state
    for a, b in zip(before, offloaded.model.parameters(), strict=True):
        assert torch.equal(a, b.detach())
    assert all(p.grad is None for p in offloaded.model.parameters())


def test_resume_restores_the_offloaded_masters_and_moments(loss_cfg, local_cfg, batch,
                                                            tmp_path):
    _, trainer = _trainers(loss_cfg, local_cfg)
    trainer.step(batch[:3])
    trainer.save(tmp_path / "ckpt")
    saved = [master.clone() for master in trainer.masters.state_dict()]
    saved_moments = [trainer.optimizer.state[m]["exp_avg"].clone()
                     for m in trainer.masters.masters]
    expected = trainer.step(batch[3:])
    resumed = GRPOTrainer(load_model(tmp_path / "ckpt", dtype="bfloat16"), trainer.ref_model,
                          loss_cfg, dataclasses.replace(local_cfg, optimizer_device="cpu"),
                          pad_id=PAD_ID)
    resumed.load_state(tmp_path / "ckpt")
    assert resumed.step_count == 1
    for master, a, moment in zip(resumed.masters.masters, saved, saved_moments, strict=True):
        assert torch.equal(master, a)
        state = resumed.optimizer.state[master]
        assert state["exp_avg"].device.type == "cpu" and torch.equal(state["exp_avg"], moment)
    got = resumed.step(batch[3:])
    # not bit-equal: a model cast with .to(bf16) keeps its rotary frequencies in bf16, one loaded
    # in bf16 recomputes them in float32 (tests/local/test_master_weights.py)
    assert got.loss == pytest.approx(expected.loss, rel=1e-2)
