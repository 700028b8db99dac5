"""Our custom loss against slime's own `policy_loss`, through slime's real training data path on
Megatron-LM's parallel state (gloo, world size 1), with the args slime makes of
scripts/alfworld/train_alfworld.sh (top-p 0.9 replay, low-variance KL, per-token loss).

The path, as slime's actor runs it: our convert hook's train data, tensorised as the rollout
manager does (slime/observability/rollout_data_utils.py:30-52), old and reference log-probs from
slime's `get_log_probs_and_entropy` (slime/backends/megatron_utils/loss.py:513), advantages from
`compute_advantages_and_returns` (loss.py:704), the micro-batch from `get_batch` over a
`DataIterator` (slime/backends/megatron_utils/data.py:14, :152; the CPU as slime's accelerator,
as slime's own tests install one) with the keys the training
forward step asks for (slime/backends/megatron_utils/model.py:580-605), then `loss_function`
(loss.py:1283), once with `--loss-type policy_loss` and once with our hook. Logits stand in for
the model's output (small vocabulary: token ids are taken modulo it).

When both roles share slime's coefficients, the two losses and their gradients agree, with
entropy off and on; at `--entropy-coef 0` slime detaches the entropy (loss.py:551), so a role's
entropy coefficient then changes neither the loss's gradient nor anything but its value.

The teacher switch (docs/design.md §4.6): our `losses.distill_advantages` equals slime's
`apply_opd_kl_to_advantages` (loss.py:663-701); our loss on a rollout with student samples (their
teachers encoded in the channel) equals slime's `policy_loss` with `--use-opd` on the same
rollout, its `teacher_log_probs` the plain teacher log-probs on student tokens and the student's
own log-probs elsewhere (a zero shift, as our coefficient 0 off student tokens); and the encoded
channel survives slime's split over data-parallel ranks (`_split_train_data_by_dp`,
slime/ray/rollout.py:757-824, tensorised as float32 there) to decode into the same teachers.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import socket
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch
import yaml

from evolving_rl import slime_hooks
from evolving_rl.losses import distill_advantages
from evolving_rl.slime_bridge.loss import decode_channel
from evolving_rl.slime_bridge.samples import to_slime_groups
from evolving_rl.slime_bridge.settings import HOOK_PATHS, SlimeArgsError
from tests import upstream

sys.path.insert(0, str(upstream.ROOT / "tests/slime"))
from slime_fixtures import (  # noqa: E402
    TEST_LOSS,
    realistic_samples,
    replayed_nucleus,
    teacher_samples,
)

VOCAB = 64
GRAD_TOLERANCE = 1e-6
DISTILL_COEF = 0.7
CHANNEL_TOLERANCE = 1e-5  # float32 codes TEACHER_BASE - v (slime_bridge/train_data.py)


@pytest.fixture(scope="module")
def parallel_state():
    """Megatron's model-parallel state on one CPU process (gloo)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    mpu.initialize_model_parallel(1, 1)
    yield mpu
    mpu.destroy_model_parallel()
    dist.destroy_process_group()


def _small_vocab(sample):
    """The sample with token ids modulo VOCAB (and its nucleus rebuilt over them)."""
    prompt = [t % VOCAB for t in sample.prompt_ids]
    response = [t % VOCAB for t in sample.response_ids]
    nucleus = replayed_nucleus([t % (VOCAB - 1) for t in response], sample.loss_mask)
    return dataclasses.replace(sample, prompt_ids=prompt, response_ids=response, nucleus=nucleus)


def _config(folder: Path, kl: float, entropy: dict[str, float], skill_use: str = "context",
            ) -> Path:
    """Our config with the given per-role KL (both roles) and entropy coefficients; under the
    teacher switch, distillation coefficient DISTILL_COEF."""
    path = folder / f"config_kl{kl}_{entropy['solver']}_{entropy['extractor']}_{skill_use}.yaml"
    loss = {**TEST_LOSS, "kl_coef": {"solver": kl, "extractor": kl}, "entropy_coef": entropy,
            "distill_coef": DISTILL_COEF}
    path.write_text(yaml.safe_dump({"environment": "alfworld", "loss": loss, "pipeline": {
        "source_tasks_per_rollout": 2, "skill_use": skill_use}}))
    return path


def _args(base: Namespace, config: Path, **change) -> Namespace:
    args = copy.deepcopy(base)
    args.evolving_rl_config = str(config)
    for key, value in change.items():
        setattr(args, key, value)
    return args


def _converted(args: Namespace, samples: list) -> dict:
    """Our convert hook's train data of `samples` (small vocabulary), as slime receives it."""
    from slime.utils.types import Sample

    flat = [s for group in to_slime_groups([_small_vocab(s) for s in samples], Sample)
            for s in group]
    return slime_hooks.convert_samples_to_train_data(args, flat)


def _rollout_data(args: Namespace, samples: list | None = None) -> dict:
    """Our convert hook's train data as the actor holds it, old/ref log-probs included."""
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy
    from slime.observability.rollout_data_utils import tensorize_rollout_data_for_training

    data = _converted(args, samples or realistic_samples())
    data["total_lengths"] = [len(t) for t in data["tokens"]]
    tensorize_rollout_data_for_training(data)
    generator = torch.Generator().manual_seed(0)
    total = sum(data["total_lengths"])
    for key, scale in (("log_probs", 0.3), ("ref_log_probs", 0.6)):
        logits = torch.randn(1, total, VOCAB, generator=generator) * scale
        _, out = get_log_probs_and_entropy(
            logits, args=args, unconcat_tokens=data["tokens"],
            total_lengths=data["total_lengths"], response_lengths=data["response_lengths"],
            with_entropy=False, top_p_token_ids=data["rollout_top_p_token_ids"],
            top_p_token_offsets=data["rollout_top_p_token_offsets"])
        data[key] = [lp.detach() for lp in out["log_probs"]]
    return data


def _loss_and_grad(args: Namespace, data: dict, logits: torch.Tensor):
    """slime's `loss_function` on one micro-batch of every sample: (loss, d loss / d logits)."""
    from slime.backends.megatron_utils.data import DataIterator, get_batch
    from slime.backends.megatron_utils.loss import compute_advantages_and_returns, loss_function
    from slime.backends.megatron_utils.model import _with_rollout_top_p_token_keys

    data = dict(data)
    compute_advantages_and_returns(args, data)
    keys = _with_rollout_top_p_token_keys(args, [
        "tokens", "multimodal_train_inputs", "packed_seq_params", "total_lengths",
        "response_lengths", "loss_masks", "log_probs", "ref_log_probs", "values", "advantages",
        "returns", "rollout_log_probs", "teacher_log_probs", "rollout_mask_sums"])
    iterator = DataIterator(data, [list(range(len(data["tokens"])))])
    batch = get_batch(iterator, keys, args.data_pad_size_multiplier, args.allgather_cp)
    leaf = logits[:, :batch["tokens"].shape[1]].detach().clone().requires_grad_(True)
    loss, _, _ = loss_function(args, batch, 1, len(data["tokens"]), leaf)
    loss.backward()
    return loss.detach(), leaf.grad


@pytest.fixture(scope="module")
def setting(alfworld_args, parallel_state, cpu_accelerator, tmp_path_factory):
    """(slime's args of the ALFWorld run on CPU, a folder, the logits)."""
    # two source tasks per rollout, as the test config's pipeline has
    # slime's own policy loss reads --kl-loss-coef, which the launch leaves at slime's 0 (our loss
    # takes the config's per-role KL): set to the reference's 0.01 here so that both losses
    # have a KL term to compare
    args = _args(alfworld_args, Path(alfworld_args.evolving_rl_config), rollout_batch_size=2,
                 global_batch_size=2, kl_loss_coef=0.01)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    logits = torch.randn(1, 512, VOCAB, generator=torch.Generator().manual_seed(1))
    return args, tmp_path_factory.mktemp("loss"), logits


@pytest.mark.parametrize("entropy", [0.0, 0.01])
def test_custom_loss_equals_slimes_policy_loss_when_roles_share_coefficients(setting, entropy):
    base, folder, logits = setting
    config = _config(folder, base.kl_loss_coef, {"solver": entropy, "extractor": entropy})
    ours = _args(base, config, entropy_coef=entropy, loss_type="custom_loss",
                 custom_loss_function_path=HOOK_PATHS["custom_loss_function_path"])
    theirs = _args(base, config, entropy_coef=entropy, loss_type="policy_loss")
    data = _rollout_data(ours)
    our_loss, our_grad = _loss_and_grad(ours, data, logits)
    slime_loss, slime_grad = _loss_and_grad(theirs, data, logits)
    assert our_loss.item() == pytest.approx(slime_loss.item(), rel=1e-5, abs=1e-7)
    assert (our_grad - slime_grad).abs().max().item() < GRAD_TOLERANCE
    assert slime_grad.abs().sum().item() > 0


def test_an_entropy_term_gets_no_gradient_at_entropy_coef_zero(setting, monkeypatch):
    """The extractor's -0.03 with slime's switch off: the gradient is the one without the term,
    which is why our hooks refuse that setting (the check is lifted here to show slime's rule)."""
    base, folder, logits = setting
    with_term = _config(folder, 0.01, {"solver": 0.0, "extractor": -0.03})
    without = _config(folder, 0.01, {"solver": 0.0, "extractor": 0.0})
    hook = {"loss_type": "custom_loss",
            "custom_loss_function_path": HOOK_PATHS["custom_loss_function_path"]}
    off = _args(base, with_term, entropy_coef=0.0, **hook)
    data = _rollout_data(off)
    with pytest.raises(SlimeArgsError, match="--entropy-coef"):
        _loss_and_grad(off, data, logits)
    monkeypatch.setattr(slime_hooks, "check_slime_args", lambda args, config: None)
    _, grad_off = _loss_and_grad(off, data, logits)
    _, grad_without = _loss_and_grad(_args(base, without, entropy_coef=0.0, **hook), data, logits)
    assert torch.equal(grad_off, grad_without)
    _, grad_on = _loss_and_grad(_args(base, with_term, entropy_coef=1.0, **hook), data, logits)
    assert (grad_on - grad_without).abs().max().item() > GRAD_TOLERANCE  # the switch matters


def test_distilled_advantages_equal_slimes_apply_opd_kl_to_advantages(setting):
    from slime.backends.megatron_utils.loss import apply_opd_kl_to_advantages

    generator = torch.Generator().manual_seed(2)
    lengths = [3, 7, 1, 12]
    advantages = [torch.randn(n, generator=generator) for n in lengths]
    student = [-torch.rand(n, generator=generator) * 5 for n in lengths]
    teacher = [-torch.rand(n, generator=generator) * 5 for n in lengths]
    ours, reverse_kl = distill_advantages(torch.cat(advantages), torch.cat(student),
                                          torch.cat(teacher), DISTILL_COEF)
    shifted, rollout_data = [a.clone() for a in advantages], {"teacher_log_probs": teacher}
    opd = Namespace(use_opd=True, opd_kl_coef=DISTILL_COEF, opd_type="sglang")
    apply_opd_kl_to_advantages(opd, rollout_data, shifted, student)
    assert torch.allclose(ours, torch.cat(shifted), rtol=1e-6, atol=1e-6)
    assert torch.allclose(reverse_kl, torch.cat(rollout_data["opd_reverse_kl"]), atol=1e-6)


def _students(data: dict) -> list[torch.Tensor]:
    """1.0 on each sample's student tokens (trained tokens that carry a teacher)."""
    return [torch.tensor([float(sample.teacher_log_probs is not None and m) for m in mask])
            for sample, mask in zip(teacher_samples(), data["loss_masks"], strict=True)]


def test_custom_loss_with_students_equals_slimes_policy_loss_with_opd(setting):
    base, folder, logits = setting
    config = _config(folder, base.kl_loss_coef, {"solver": 0.0, "extractor": 0.0}, "teacher")
    ours = _args(base, config, entropy_coef=0.0, loss_type="custom_loss",
                 custom_loss_function_path=HOOK_PATHS["custom_loss_function_path"])
    theirs = _args(base, config, entropy_coef=0.0, loss_type="policy_loss", use_opd=True,
                   opd_kl_coef=DISTILL_COEF, opd_type="sglang")
    data = _rollout_data(ours, teacher_samples())
    # slime's OPD shifts every token: plain teacher log-probs on student tokens, and the
    # student's own log-probs elsewhere (a zero shift there, as our coefficient 0)
    plain = [torch.tensor(s.teacher_log_probs or [0.0] * s.response_length)
             for s in teacher_samples()]
    slime_data = dict(data, teacher_log_probs=[
        torch.where(student.bool(), teacher, old) for student, teacher, old in zip(
            _students(data), plain, data["log_probs"], strict=True)])
    our_loss, our_grad = _loss_and_grad(ours, data, logits)
    slime_loss, slime_grad = _loss_and_grad(theirs, slime_data, logits)
    assert our_loss.item() == pytest.approx(slime_loss.item(), rel=1e-5, abs=1e-6)
    assert (our_grad - slime_grad).abs().max().item() < GRAD_TOLERANCE
    # the distillation is in both: without it, slime's loss differs
    theirs.use_opd = False
    assert _loss_and_grad(theirs, data, logits)[0].item() != pytest.approx(slime_loss.item())


def test_the_teacher_channel_survives_slimes_split_over_data_parallel_ranks(setting,
                                                                            monkeypatch):
    from slime.ray import rollout

    base, folder, _ = setting
    args = _args(base, _config(folder, 0.01, {"solver": 0.0, "extractor": 0.0}, "teacher"))
    data = _converted(args, teacher_samples())
    monkeypatch.setattr(rollout.ray, "put", lambda value, **kwargs: value)  # no object store
    manager = Namespace(args=args, train_parallel_config={
        "dp_size": 2, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1})
    boxes = rollout.RolloutManager.__ray_actor_class__._split_train_data_by_dp(manager, data)
    samples, students = teacher_samples(), _students(data)
    seen = []
    for rank in (box.inner for box in boxes):
        channel = decode_channel(rank, torch.device("cpu"))
        lengths = rank["response_lengths"]
        for i, extractor, student, teacher in zip(
                rank["partition"], channel.extractor.split(lengths),
                channel.student.split(lengths), channel.teacher.split(lengths), strict=True):
            seen.append(i)
            assert torch.equal(student, students[i])
            assert bool(extractor.any()) == (samples[i].role.value == "extractor")
            expected = torch.tensor(samples[i].teacher_log_probs or [0.0] * len(student))
            assert (teacher - expected * student).abs().max().item() < CHANNEL_TOLERANCE
    assert sorted(seen) == list(range(len(samples))) and len(boxes) == 2
    assert sum(bool(s.any()) for s in students) == 2
