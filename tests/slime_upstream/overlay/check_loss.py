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
from evolving_rl.slime_bridge.samples import to_slime_groups
from evolving_rl.slime_bridge.settings import HOOK_PATHS, SlimeArgsError
from tests import upstream

sys.path.insert(0, str(upstream.ROOT / "tests/slime"))
from slime_fixtures import TEST_LOSS, realistic_samples, replayed_nucleus  # noqa: E402

VOCAB = 64
GRAD_TOLERANCE = 1e-6


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


def _config(folder: Path, kl: float, entropy: dict[str, float]) -> Path:
    """Our config with the given per-role KL (both roles) and entropy coefficients."""
    path = folder / f"config_kl{kl}_{entropy['solver']}_{entropy['extractor']}.yaml"
    loss = {**TEST_LOSS, "kl_coef": {"solver": kl, "extractor": kl}, "entropy_coef": entropy}
    path.write_text(yaml.safe_dump({"environment": "alfworld", "loss": loss,
                                    "pipeline": {"source_tasks_per_rollout": 2}}))
    return path


def _args(base: Namespace, config: Path, **change) -> Namespace:
    args = copy.deepcopy(base)
    args.evolving_rl_config = str(config)
    for key, value in change.items():
        setattr(args, key, value)
    return args


def _rollout_data(args: Namespace) -> dict:
    """Our convert hook's train data as the actor holds it, old/ref log-probs included."""
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy
    from slime.observability.rollout_data_utils import tensorize_rollout_data_for_training
    from slime.utils.types import Sample

    samples = [_small_vocab(s) for s in realistic_samples()]
    flat = [s for group in to_slime_groups(samples, Sample) for s in group]
    data = slime_hooks.convert_samples_to_train_data(args, flat)
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
    args = _args(alfworld_args, Path(alfworld_args.evolving_rl_config), rollout_batch_size=2,
                 global_batch_size=2)
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
