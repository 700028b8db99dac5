"""The teacher switch on the slime path (docs/design.md §4.6, §5.2-5.3): a student's teacher
log-probs ride slime's `teacher_log_probs` channel beside the role codes (`train_data`) and the
custom loss decodes them into on-policy distillation (`loss`). Checked here: the round trip at
float32, the role mask with teacher codes, refusals of misaligned or impossible teachers, the loss
against the advantage shift of slime's `--use-opd` done by hand, and that without a teacher the
loss is today's bit for bit. tests/slime_upstream/overlay/check_loss.py checks the same against
slime's own functions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml
from slime_fixtures import (
    TEST_LOSS,
    given_log_probs_and_entropy,
    realistic_samples,
    slime_batch,
    sum_of_token_reducer,
    teacher_samples,
)

from evolving_rl import slime_hooks
from evolving_rl.core.roles import Role
from evolving_rl.losses import per_token_policy_loss
from evolving_rl.slime_bridge import loss as loss_module
from evolving_rl.slime_bridge import slime_api
from evolving_rl.slime_bridge.loss import custom_policy_loss, decode_channel
from evolving_rl.slime_bridge.samples import to_slime_groups
from evolving_rl.slime_bridge.settings import load_run_config
from evolving_rl.slime_bridge.train_data import ROLE_CHANNEL_KEY, ROLE_CODES, TEACHER_BASE

ROUND_TRIP_TOLERANCE = 1e-5
DISTILL_COEF = 0.7


def _config(folder: Path, skill_use: str, distill_coef: float = DISTILL_COEF) -> str:
    path = folder / f"config_{skill_use}_{distill_coef}.yaml"
    path.write_text(yaml.safe_dump({
        "environment": "alfworld", "loss": {**TEST_LOSS, "distill_coef": distill_coef},
        "pipeline": {"source_tasks_per_rollout": 2, "skill_use": skill_use}}))
    return str(path)


def _slime_samples(samples, slime_types) -> list:
    return [s for group in to_slime_groups(samples, slime_types.sample) for s in group]


def _train_data(slime_args, slime_types, samples=None) -> dict:
    return slime_hooks.convert_samples_to_train_data(
        slime_args, _slime_samples(samples or teacher_samples(), slime_types))


def _batch(data: dict, monkeypatch) -> tuple[dict, list[torch.Tensor], list[torch.Tensor]]:
    """A micro-batch of every sample whose current log-probs differ from the old ones (so the
    ratio and the clip are exercised); slime's log-probs stand-in returns them."""
    generator = torch.Generator().manual_seed(3)
    old = [torch.tensor(lp) + 0.1 * torch.randn(len(lp), generator=generator)
           for lp in data["rollout_log_probs"]]
    current = [torch.nn.Parameter(o + 0.08 * torch.randn(len(o), generator=generator))
               for o in old]
    entropies = [torch.nn.Parameter(torch.full((len(o),), 1.5)) for o in old]
    batch = slime_batch(data, old, [o - 0.3 for o in old])
    monkeypatch.setattr(slime_api, "log_probs_and_entropy",
                        given_log_probs_and_entropy(current, entropies))
    return batch, current, entropies


def _run(args, batch, config_file: str):
    args.evolving_rl_config = config_file
    logits = torch.zeros(1, sum(batch["total_lengths"]), 8)
    return custom_policy_loss(args, batch, logits, sum_of_token_reducer(batch),
                              load_run_config(args))


def test_the_channel_round_trips_teachers_and_roles_at_float32(slime_args, slime_types):
    samples = teacher_samples()
    data = _train_data(slime_args, slime_types, samples)
    batch = {ROLE_CHANNEL_KEY: [torch.tensor(c, dtype=torch.float32)
                                for c in data[ROLE_CHANNEL_KEY]]}
    channel = decode_channel(batch, torch.device("cpu"))
    lengths = data["response_lengths"]
    for sample, extractor, student, teacher in zip(
            samples, channel.extractor.split(lengths), channel.student.split(lengths),
            channel.teacher.split(lengths), strict=True):
        mask = torch.tensor(sample.loss_mask, dtype=torch.float32)
        assert torch.equal(extractor, torch.full_like(mask, float(sample.role is Role.EXTRACTOR)))
        if sample.teacher_log_probs is None:
            assert not student.any() and not teacher.any()
            continue
        assert torch.equal(student, mask)  # trained tokens only; observations are solver tokens
        expected = torch.tensor(sample.teacher_log_probs) * mask
        assert (teacher - expected).abs().max().item() < ROUND_TRIP_TOLERANCE
    student_codes = data[ROLE_CHANNEL_KEY][6]
    assert min(c for c, m in zip(student_codes, samples[6].loss_mask, strict=True) if m) \
        == TEACHER_BASE  # a teacher log-prob of exactly 0 is still a teacher
    assert student_codes[5:10] == [ROLE_CODES[Role.SOLVER]] * 5


def test_without_students_the_channel_is_the_role_codes_alone(slime_args, slime_types):
    data = _train_data(slime_args, slime_types, realistic_samples())
    assert [set(codes) for codes in data[ROLE_CHANNEL_KEY]] == [{1.0}] * 3 + [{0.0}] * 5


NAN = float("nan")


@pytest.mark.parametrize("role, teacher, match", [
    (Role.SOLVER, [-1.0] * 13, "13 teacher log-probs for 14"),
    (Role.SOLVER, [0.5] + [-1.0] * 13, "token 0 is not a finite log-prob"),
    (Role.SOLVER, [-1.0] * 10 + [NAN] + [-1.0] * 3, "token 10 is not a finite log-prob"),
    (Role.EXTRACTOR, [-1.0] * 14, "extractor sample with teacher log-probs"),
])
def test_impossible_teachers_are_refused(slime_args, slime_types, role, teacher, match):
    samples = teacher_samples()
    samples[6] = dataclasses.replace(samples[6], role=role)
    converted = _slime_samples(samples, slime_types)
    converted[6].teacher_log_probs = teacher
    with pytest.raises(ValueError, match=match):
        slime_hooks.convert_samples_to_train_data(slime_args, converted)


@pytest.mark.parametrize("code", [0.5, 1.5, -1.0, 1.999])
def test_codes_that_are_neither_roles_nor_teachers_are_refused(code):
    batch = {ROLE_CHANNEL_KEY: [torch.tensor([0.0, 1.0, 2.5, code])]}
    with pytest.raises(RuntimeError, match="neither role codes nor teacher codes"):
        decode_channel(batch, torch.device("cpu"))


def test_student_tokens_are_distilled_as_slimes_opd_shifts_the_advantages(
        slime_args, slime_types, monkeypatch, tmp_path):
    data = _train_data(slime_args, slime_types)
    batch, current, entropies = _batch(data, monkeypatch)
    loss, metrics = _run(slime_args, batch, _config(tmp_path, "teacher"))
    # by hand: A' = A - coef * (old - teacher) on student tokens, then the loss without teacher
    old, teacher = torch.cat(batch["log_probs"]), torch.cat(
        [torch.tensor(s.teacher_log_probs or [0.0] * s.response_length)
         for s in teacher_samples()])
    student = torch.cat([torch.tensor(m, dtype=torch.float32) if s.teacher_log_probs else
                         torch.zeros(s.response_length) for s, m in
                         zip(teacher_samples(), data["loss_masks"], strict=True)])
    shifted = torch.cat(batch["advantages"]) - DISTILL_COEF * student * (old - teacher)
    extractor = torch.cat([torch.full((s.response_length,), float(s.role is Role.EXTRACTOR))
                           for s in teacher_samples()])
    kl = TEST_LOSS["kl_coef"]
    ent = TEST_LOSS["entropy_coef"]
    terms = per_token_policy_loss(
        log_probs=torch.cat(current), old_log_probs=old, advantages=shifted, eps_low=0.1,
        eps_high=0.15, ref_log_probs=torch.cat(batch["ref_log_probs"]),
        kl_coef=kl["solver"] + extractor * (kl["extractor"] - kl["solver"]),
        entropy=torch.cat(entropies),
        entropy_coef=ent["solver"] + extractor * (ent["extractor"] - ent["solver"]))
    reduce = sum_of_token_reducer(batch)
    assert loss.item() == pytest.approx(reduce(terms.loss).item(), rel=1e-6, abs=1e-6)
    assert metrics["student_token_frac"].item() == 2 * 9  # two students, 9 trained tokens each
    assert metrics["distill_kl"].item() == pytest.approx(
        reduce(student * (old - teacher)).item(), abs=1e-4)
    # the distillation moves the loss: at coefficient 0 the term (and its logged KL) is gone
    _, plain = _run(slime_args, batch, _config(tmp_path, "teacher", distill_coef=0.0))
    assert plain["distill_kl"].item() == 0.0
    assert plain["loss"].item() != pytest.approx(loss.item())


def test_without_a_teacher_the_loss_is_todays_bit_for_bit(slime_args, slime_types, monkeypatch,
                                                          tmp_path):
    """No student in the batch: the teacher switch's config and the reference's give the same
    loss and gradient bits, through a `per_token_policy_loss` call without teacher arguments."""
    data = _train_data(slime_args, slime_types, realistic_samples())
    batch, current, _ = _batch(data, monkeypatch)
    calls = []

    def spy(**kwargs):
        calls.append(kwargs)
        return per_token_policy_loss(**kwargs)

    monkeypatch.setattr(loss_module, "per_token_policy_loss", spy)
    results = []
    for skill_use in ("context", "teacher"):
        loss, metrics = _run(slime_args, batch, _config(tmp_path, skill_use))
        (grad,) = torch.autograd.grad(loss, current[3])
        results.append((loss, grad, metrics))
    assert all("teacher_log_probs" not in c and "distill_coef" not in c for c in calls)
    (loss_ref, grad_ref, metrics_ref), (loss_t, grad_t, metrics_t) = results
    assert torch.equal(loss_ref, loss_t) and torch.equal(grad_ref, grad_t)
    assert "distill_kl" not in metrics_ref and metrics_t["distill_kl"].item() == 0.0
    assert metrics_t["student_token_frac"].item() == 0.0


def test_teacher_codes_need_the_teacher_switch(slime_args, slime_types, monkeypatch, tmp_path):
    batch, _, _ = _batch(_train_data(slime_args, slime_types), monkeypatch)
    with pytest.raises(RuntimeError, match="skill_use is not teacher"):
        _run(slime_args, batch, _config(tmp_path, "context"))
