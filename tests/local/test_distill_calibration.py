"""The local backend's β per step (`local.distill_calibration`) and the trainer taking it."""

from argparse import Namespace

import pytest
import torch

from evolving_rl.config import parse_config
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.distill_calibration import DistillCalibration
from evolving_rl.local.trainer import GRPOTrainer
from evolving_rl.slime_bridge.settings import SlimeArgsError, check_slime_args
from tests.local.local_helpers import tiny_llama


def _step(advantage, old, teacher):
    """A step's samples: one solver sample with `advantage`, one student with `teacher`."""
    return [TrainSample(role=Role.SOLVER, prompt_ids=[1], response_ids=[2], loss_mask=[1],
                        log_probs=[-1.0], reward=1.0, group_id="g", advantage=advantage),
            TrainSample(role=Role.SOLVER, prompt_ids=[1], response_ids=[3], loss_mask=[1],
                        log_probs=[old], reward=0.0, group_id="g", advantage=0.0,
                        teacher_log_probs=[teacher])]


def _loss(**loss):
    return parse_config({"loss": loss}).loss


def test_fixed_beta_is_kept_and_the_sizes_are_logged():
    calibration = DistillCalibration(_loss(distill_coef=0.5))
    beta, metrics = calibration.measure(_step(1.0, -1.0, -0.9))
    assert beta == 0.5 and metrics["teacher/beta"] == 0.5
    assert metrics["teacher/measured_beta"] == pytest.approx(10.0)
    assert metrics["teacher/mean_abs_log_ratio"] == pytest.approx(0.1)


def test_calibration_uses_the_median_of_the_first_k_steps_with_evidence_then_freezes():
    calibration = DistillCalibration(_loss(distill_coef=1.0, distill_calibration_steps=3))
    betas = [calibration.measure(samples)[0] for samples in (
        _step(0.0, -1.0, -0.5),      # no advantage: no evidence, the fixed β
        _step(1.0, -1.0, -0.9),      # measures 10
        _step(1.0, -1.0, -0.98),     # measures 50: median(10, 50) = 30
        _step(2.0, -1.0, -0.9),      # measures 20: median(10, 50, 20) = 20, now frozen
        _step(1.0, -1.0, -0.999),    # would measure 1000: ignored
    )]
    assert betas == pytest.approx([1.0, 10.0, 30.0, 20.0, 20.0])
    assert calibration.frozen


def test_slime_refuses_calibration():
    cfg = parse_config({"loss": {"distill_calibration_steps": 2}})
    with pytest.raises(SlimeArgsError, match="distill_calibration_steps"):
        check_slime_args(Namespace(), cfg)


def test_the_trainer_trains_with_the_beta_it_is_given():
    model = tiny_llama()
    trainer = GRPOTrainer(model, None, _loss(kl_coef={"solver": 0.0, "extractor": 0.0}),
                          parse_config({}).local, pad_id=0)
    trainer.set_distill_coef(7.0)
    batch = trainer.micro_batches(_step(1.0, -1.0, -0.9))[0]
    assert torch.equal(batch.distill_coef, torch.tensor([0.0, 7.0]))
    with pytest.raises(ValueError, match=">= 0"):
        trainer.set_distill_coef(-1.0)
