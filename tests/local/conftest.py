"""Fixtures of the local-backend tests (helpers in `local_helpers`)."""

from __future__ import annotations

import pytest
from local_helpers import CharTokenizer, make_sample

from evolving_rl.config.schema import LocalConfig, LossConfig, RoleCoefficients
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample


@pytest.fixture
def tokenizer() -> CharTokenizer:
    return CharTokenizer()


@pytest.fixture
def loss_cfg() -> LossConfig:
    return LossConfig(lr=1e-3, weight_decay=0.0,
                      kl_coef=RoleCoefficients(solver=0.01, extractor=0.01),
                      entropy_coef=RoleCoefficients(solver=0.0, extractor=-0.03))


@pytest.fixture
def local_cfg() -> LocalConfig:
    return LocalConfig(micro_batch_size=2, gradient_checkpointing=False, torch_threads=1)


@pytest.fixture
def batch() -> list[TrainSample]:
    """Six samples of both roles, mixed lengths, some observation (mask 0) tokens."""
    specs = [(Role.SOLVER, 5, 7, 1.0), (Role.SOLVER, 3, 9, -1.0), (Role.EXTRACTOR, 6, 4, 0.5),
             (Role.EXTRACTOR, 4, 6, -0.5), (Role.SOLVER, 8, 5, 0.8), (Role.EXTRACTOR, 2, 8, -0.3)]
    return [make_sample(role, p, r, a, seed=i, masked_every=3)
            for i, (role, p, r, a) in enumerate(specs)]
