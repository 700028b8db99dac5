"""Our slime hooks called exactly as slime calls them at the pinned commit, on a fake pipeline.

Call sites mirrored (slime 624b824a):
  - rollout:   `fn(args, rollout_id, data_source, evaluation=evaluation)` (call_rollout_fn)
  - post-process / convert: `func(self.args, samples)` (ray/rollout.py), samples flattened
  - loggers:   `custom_log_func(rollout_id, args, samples, rollout_extra_metrics, rollout_time)`,
               `custom_log_func(rollout_id, args, data, extra_metrics)` (rollout_metrics.py)
  - loss:      `func(args, batch, logits, sum_of_sample_mean)` (megatron_utils/loss.py)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from argparse import Namespace

import pytest
import torch
from slime_fixtures import (
    TEST_LOSS,
    FakeDataSource,
    given_log_probs_and_entropy,
    launcher_args,
    logits_log_probs_and_entropy,
    real_slime,
    realistic_samples,
    slime_batch,
    sum_of_token_reducer,
)

from evolving_rl import slime_hooks
from evolving_rl.config import ConfigError
from evolving_rl.core.roles import Role
from evolving_rl.domains import registry
from evolving_rl.losses import low_var_kl
from evolving_rl.slime_bridge import runtime, slime_api
from evolving_rl.slime_bridge.loss import custom_policy_loss
from evolving_rl.slime_bridge.samples import TAG_KEY, ForeignSampleError
from evolving_rl.slime_bridge.settings import SlimeArgsError, check_slime_args, load_run_config


def _rollout(slime_args, slime_types, rollout_id=0):
    source = FakeDataSource(slime_types.sample)
    return slime_hooks.generate_rollout(slime_args, rollout_id, source, evaluation=False)


def _flat(output):
    return list(itertools.chain.from_iterable(output.samples))


def test_rollout_output_keeps_tokens_masks_groups_and_advantages(
        slime_args, slime_types, fake_pipeline):
    output = _rollout(slime_args, slime_types)
    assert isinstance(output, slime_types.train_output)
    expected = realistic_samples()
    assert [len(group) for group in output.samples] == [3, 3, 2]
    for sample, ours in zip(_flat(output), expected, strict=True):
        assert isinstance(sample, slime_types.sample)
        assert sample.tokens == ours.prompt_ids + ours.response_ids
        assert sample.response_length == len(ours.response_ids)
        assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
        assert sample.loss_mask == ours.loss_mask and sample.rollout_log_probs == ours.log_probs
        assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask,
                                              strict=True) if m == 0)
        tag = sample.metadata[TAG_KEY]
        assert (tag["role"], tag["group_id"], tag["advantage"]) == \
            (ours.role.value, ours.group_id, ours.advantage)
        assert sample.reward == ours.reward
        assert sample.metadata["task_type"] == ours.metadata["task_type"]
    statuses = [s.status.name for s in _flat(output)]
    assert statuses == ["COMPLETED"] * 6 + ["TRUNCATED"] * 2
    assert [s.group_index for s in _flat(output)] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert [s.index for s in _flat(output)] == list(range(8))
    extractor_adv = [s.metadata[TAG_KEY]["advantage"] for s in output.samples[0]]
    assert max(abs(a) for a in extractor_adv) == pytest.approx(0.2 * 1.2247, abs=1e-3)
    assert output.metrics == {"wall_s": 12.5, "removed/env_error": 1.0}


def test_rollout_builds_context_once_and_passes_rows(slime_args, slime_types, fake_pipeline):
    _rollout(slime_args, slime_types, 0)
    _rollout(slime_args, slime_types, 1)
    context = fake_pipeline["context"]
    assert context["policy_url"] == "http://127.0.0.1:30000"
    assert context["tokenizer_path"] == slime_args.hf_checkpoint
    assert context["config"].loss.kl_coef.extractor == TEST_LOSS["kl_coef"]["extractor"]
    assert len(fake_pipeline["rows"]) == 2 and len(fake_pipeline["rows"][0]) == 2
    assert fake_pipeline["rollout_ids"] == [0, 1]
    row = fake_pipeline["rows"][0][0]
    assert row["id"] == "train/t0/trial" and row["prompt"] == row["question"]
    assert row["metadata"]["environment"] == "alfworld"


def test_rollout_refuses_several_samples_per_prompt(slime_args, slime_types, fake_pipeline):
    source = FakeDataSource(slime_types.sample, n_per_prompt=2)
    with pytest.raises(ValueError, match="n-samples-per-prompt 1"):
        slime_hooks.generate_rollout(slime_args, 0, source, evaluation=False)


def test_eval_runs_each_dataset(slime_args, slime_types, fake_pipeline, tmp_path):
    data = tmp_path / "valid_unseen.jsonl"
    data.write_text("".join(json.dumps({"id": f"v{i}", "question": "q", "prompt": "q",
                                        "metadata": {"task_type": "pick_two_obj_and_place"}})
                            + "\n" for i in range(3)))
    slime_args.eval_prompt_data = ["valid_unseen", str(data)]
    output = slime_hooks.generate_rollout(slime_args, 5, FakeDataSource(slime_types.sample),
                                          evaluation=True)
    assert isinstance(output, slime_types.eval_output)
    assert set(output.data["valid_unseen"]) == {"rewards", "truncated", "samples"}
    assert output.metrics == {"eval/valid_unseen/success_with_skill": 0.75,
                              "eval/valid_unseen/success_without_skill": 0.5}
    assert [r["id"] for r in fake_pipeline["eval_rows"][0]] == ["v0", "v1", "v2"]


def test_missing_or_invalid_config_fails_loudly(slime_args, slime_types, fake_pipeline, tmp_path):
    del slime_args.evolving_rl_config
    with pytest.raises(ConfigError, match="evolving_rl_config"):
        _rollout(slime_args, slime_types)
    bad = tmp_path / "bad.yaml"
    bad.write_text("loss: {clip_eps_low: 0.1, no_such_key: 1}\n")
    slime_args.evolving_rl_config = str(bad)
    with pytest.raises(ConfigError, match="no_such_key"):
        _rollout(slime_args, slime_types)


def test_unregistered_environment_fails_before_the_runtime_starts(
        slime_args, slime_types, fake_pipeline, monkeypatch):
    monkeypatch.delitem(registry.DOMAINS, "alfworld")
    with pytest.raises(ConfigError, match="'alfworld' has no registered domain"):
        _rollout(slime_args, slime_types)
    assert "context" not in fake_pipeline and runtime.RUNTIMES == {}


def test_incompatible_slime_args_are_all_reported(slime_args, slime_types, fake_pipeline):
    slime_args.normalize_advantages = True
    slime_args.eps_clip_high = 0.28
    slime_args.calculate_per_token_loss = False
    slime_args.custom_loss_function_path = "slime.backends.megatron_utils.loss.policy_loss"
    with pytest.raises(SlimeArgsError) as err:
        _rollout(slime_args, slime_types)
    for flag in ("--normalize-advantages", "--eps-clip-high", "--calculate-per-token-loss",
                 "--custom-loss-function-path"):
        assert flag in str(err.value)


def test_reward_post_process_keeps_our_advantages(slime_args, slime_types, fake_pipeline):
    samples = _flat(_rollout(slime_args, slime_types))
    raw, rewards = slime_hooks.post_process_rewards(slime_args, samples)
    assert raw == [s.reward for s in realistic_samples()]
    assert rewards == [s.advantage for s in realistic_samples()]
    with pytest.raises(ForeignSampleError):
        slime_hooks.post_process_rewards(slime_args, [slime_types.sample(index=0, reward=1.0)])


def test_convert_carries_roles_and_makes_one_step_per_rollout(
        slime_args, slime_types, fake_pipeline):
    samples = _flat(_rollout(slime_args, slime_types))
    data = slime_hooks.convert_samples_to_train_data(slime_args, samples)
    ours = realistic_samples()
    assert data["rewards"] == [s.advantage for s in ours]
    assert data["raw_reward"] == [s.reward for s in ours]
    assert data["truncated"] == [0] * 6 + [1] * 2
    assert data["loss_masks"] == [s.loss_mask for s in ours]
    assert data["rollout_log_probs"] == [s.log_probs for s in ours]
    assert [set(codes) for codes in data["teacher_log_probs"]] == [{1.0}] * 3 + [{0.0}] * 5
    assert [len(c) for c in data["teacher_log_probs"]] == data["response_lengths"]
    assert sorted(set(data["rollout_ids"])) == [0, 1]  # == global_batch_size: one step
    assert sum(data["rollout_mask_sums"][i] for i in (0, 4)) == sum(map(sum, data["loss_masks"]))
    slime_args.global_batch_size = 9
    with pytest.raises(ValueError, match="zero optimiser steps"):
        slime_hooks.convert_samples_to_train_data(slime_args, samples)


def _policy(train_data):
    """Trainable current log-probs and entropies, one tensor per sample (as slime returns)."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.tensor(lp) + 0.05 * torch.randn(len(lp)))
              for lp in train_data["rollout_log_probs"]]
    entropies = [torch.nn.Parameter(torch.full((len(lp),), 1.5) + 0.1 * torch.arange(len(lp)))
                 for lp in params]
    return params, entropies


def _hand_loss(train_data, log_probs, ref, entropies, roles):
    """Σ over masked tokens of pg + kl_coef(role)·kl − entropy_coef(role)·H (ratio = 1 here)."""
    total = torch.zeros(())
    for i, role in enumerate(roles):
        coef_kl, coef_h = TEST_LOSS["kl_coef"][role.value], TEST_LOSS["entropy_coef"][role.value]
        mask = torch.tensor(train_data["loss_masks"][i], dtype=torch.float32)
        per_token = (-train_data["rewards"][i] + coef_kl * low_var_kl(log_probs[i], ref[i])
                     - coef_h * entropies[i])
        total = total + (per_token * mask).sum()
    return total


def test_per_sample_role_reaches_the_loss_with_its_coefficients(
        slime_args, slime_types, fake_pipeline, monkeypatch):
    samples = _flat(_rollout(slime_args, slime_types))
    data = slime_hooks.convert_samples_to_train_data(slime_args, samples)
    log_probs, entropies = _policy(data)
    ref = [torch.tensor(lp) - 0.3 for lp in data["rollout_log_probs"]]
    batch = slime_batch(data, log_probs, ref)
    monkeypatch.setattr(slime_api, "log_probs_and_entropy",
                        given_log_probs_and_entropy(log_probs, entropies))
    logits = torch.zeros(1, sum(batch["total_lengths"]), 8)
    loss, metrics = slime_hooks.policy_loss(slime_args, batch, logits, sum_of_token_reducer(batch))
    roles = [s.role for s in realistic_samples()]
    assert loss.item() == pytest.approx(_hand_loss(data, log_probs, ref, entropies, roles).item(),
                                        rel=1e-5)
    # Flip the first extractor sample to the solver code: the loss moves by exactly its tokens'
    # KL and entropy coefficient differences, so the coefficient is per sample, not per batch.
    flipped = dict(batch, teacher_log_probs=[torch.zeros_like(t) if i == 0 else t
                                             for i, t in enumerate(batch["teacher_log_probs"])])
    loss_flipped, _ = slime_hooks.policy_loss(slime_args, flipped, logits,
                                              sum_of_token_reducer(flipped))
    kl0, mask0 = low_var_kl(log_probs[0], ref[0]), torch.tensor(data["loss_masks"][0]).float()
    shift = ((TEST_LOSS["kl_coef"]["solver"] - TEST_LOSS["kl_coef"]["extractor"]) * kl0
             - (TEST_LOSS["entropy_coef"]["solver"] - TEST_LOSS["entropy_coef"]["extractor"])
             * entropies[0]) * mask0
    assert (loss_flipped - loss).item() == pytest.approx(shift.sum().item(), rel=1e-5)
    assert metrics["extractor_token_frac"].item() == 15.0  # 3 extractor samples x 5 tokens
    loss.backward()
    assert all(p.grad is not None for p in log_probs)
    assert log_probs[3].grad[5:10].abs().sum().item() == 0.0  # observation tokens get no gradient
    # Entropy gradient per token = -(the role's entropy coefficient) on trainable tokens.
    for entropy, mask, role in zip(entropies, data["loss_masks"], roles, strict=True):
        expected = -TEST_LOSS["entropy_coef"][role.value] * torch.tensor(mask).float()
        assert torch.allclose(entropy.grad, expected, atol=1e-6)


def test_loss_without_role_channel_fails_loudly(slime_args, slime_types, fake_pipeline,
                                                monkeypatch):
    data = slime_hooks.convert_samples_to_train_data(
        slime_args, _flat(_rollout(slime_args, slime_types)))
    log_probs, entropies = _policy(data)
    batch = slime_batch(data, log_probs, [lp.detach() for lp in log_probs])
    batch["teacher_log_probs"] = None
    monkeypatch.setattr(slime_api, "log_probs_and_entropy",
                        given_log_probs_and_entropy(log_probs, entropies))
    with pytest.raises(RuntimeError, match="role channel"):
        slime_hooks.policy_loss(slime_args, batch, torch.zeros(1, 4, 8),
                                sum_of_token_reducer(batch))


@real_slime
def test_real_slime_schedules_a_rollout_of_any_size_only_with_dynamic_batches(
        slime_args, slime_types, fake_pipeline):
    """slime's own DP schedule on our convert hook's output of an odd sample count (7), DP 2,
    micro-batch 1: the static path refuses it (slime/utils/dp_schedule.py:169-185), the dynamic
    one makes exactly one optimiser step of `global_batch_size` rollouts."""
    from slime.utils.dp_schedule import build_dp_schedule

    data = slime_hooks.convert_samples_to_train_data(
        slime_args, _flat(_rollout(slime_args, slime_types))[:7])
    parallel = {"dp_size": 2, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}

    def schedule(dynamic: bool):
        args = Namespace(use_dynamic_batch_size=dynamic, max_tokens_per_gpu=16384,
                         micro_batch_size=1, balance_by_flops=False, balance_data=False)
        return build_dp_schedule(args, parallel, [len(t) for t in data["tokens"]],
                                 global_batch_size=slime_args.global_batch_size,
                                 rollout_indices=data["rollout_ids"])

    with pytest.raises(AssertionError, match="static path"):
        schedule(False)
    _, _, num_microbatches, global_batch_sizes = schedule(True)
    assert len(num_microbatches) == 1 and global_batch_sizes == [slime_args.global_batch_size]


VOCAB = 16


def _logits(batch) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, sum(batch["total_lengths"]), VOCAB, generator=generator)


def _entropy_term_gradient(args, batch, config) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, d loss / d logits of the entropy term alone): the loss gradient minus the one with
    every entropy coefficient at 0, through slime's log-prob/entropy computation."""
    silent = dataclasses.replace(config, loss=dataclasses.replace(
        config.loss, entropy_coef=dataclasses.replace(config.loss.entropy_coef, solver=0.0,
                                                      extractor=0.0)))
    grads, losses = [], []
    for cfg in (config, silent):
        logits = _logits(batch).requires_grad_()
        loss, _ = custom_policy_loss(args, batch, logits, sum_of_token_reducer(batch), cfg)
        loss.backward()
        grads.append(logits.grad)
        losses.append(loss.detach())
    return losses[0], grads[0] - grads[1]


def _expected_entropy_gradient(batch) -> torch.Tensor:
    """d/d logits of sum over trainable tokens of -entropy_coef(role) * entropy."""
    logits = _logits(batch).requires_grad_()
    _, entropies = logits_log_probs_and_entropy(Namespace(entropy_coef=1.0), batch, logits)
    roles = [Role.EXTRACTOR if bool(codes[0]) else Role.SOLVER
             for codes in batch["teacher_log_probs"]]
    term = sum((-TEST_LOSS["entropy_coef"][role.value] * h * mask).sum()
               for h, mask, role in zip(entropies, batch["loss_masks"], roles, strict=True))
    return torch.autograd.grad(term, logits)[0]


def test_extractor_entropy_is_trained_only_with_the_launchers_entropy_coef(
        slime_args, slime_types, fake_pipeline, monkeypatch):
    """slime detaches the entropy when --entropy-coef is 0, its default: the extractor's -0.03
    term then changes nothing but the logged loss. With the launcher's args it gets exactly its
    per-role gradient, and our check refuses the silent case."""
    data = slime_hooks.convert_samples_to_train_data(
        slime_args, _flat(_rollout(slime_args, slime_types)))
    old = [torch.tensor(lp) for lp in data["rollout_log_probs"]]
    batch = slime_batch(data, old, [lp - 0.3 for lp in old])
    batch["unconcat_tokens"] = [tokens % VOCAB for tokens in batch["unconcat_tokens"]]
    monkeypatch.setattr(slime_api, "log_probs_and_entropy", logits_log_probs_and_entropy)
    config = load_run_config(slime_args)
    slime_default = Namespace(**{**vars(slime_args), "entropy_coef": 0.0})
    launched = Namespace(**{**vars(slime_args), "entropy_coef": launcher_args().entropy_coef})

    silent_loss, silent = _entropy_term_gradient(slime_default, batch, config)
    assert torch.allclose(silent, torch.zeros_like(silent), atol=1e-7)
    with pytest.raises(SlimeArgsError, match="--entropy-coef"):
        check_slime_args(slime_default, config)

    loss, trained = _entropy_term_gradient(launched, batch, config)
    expected = _expected_entropy_gradient(batch)
    assert expected.abs().sum().item() > 1e-2
    assert torch.allclose(trained, expected, atol=1e-6)
    assert loss.item() == pytest.approx(silent_loss.item(), rel=1e-6)  # same value either way
    check_slime_args(launched, config)


@pytest.fixture
def emitted(monkeypatch, slime_args):
    """What the loggers send to slime's sinks, with TensorBoard on."""
    slime_args.use_tensorboard = True
    sink: list = []
    monkeypatch.setattr(slime_api, "default_rollout_metrics", lambda args, s, t: {"rollout/x": 1})
    monkeypatch.setattr(slime_api, "emit_metrics",
                        lambda args, metrics, rollout_id, step_key: sink.append(
                            (rollout_id, step_key, metrics)))
    return sink


def test_rollout_logger_reports_roles_task_types_groups_and_statuses(
        slime_args, slime_types, fake_pipeline, emitted):
    output = _rollout(slime_args, slime_types)
    assert slime_hooks.log_rollout(7, slime_args, _flat(output), output.metrics, 30.0) is True
    rollout_id, step_key, m = emitted[0]
    assert (rollout_id, step_key) == (7, "rollout/step")
    assert m["rollout/extractor/count"] == 3 and m["rollout/solver/count"] == 5
    assert m["rollout/extractor/audit_failures"] == 1 and m["rollout/extractor/parse_failures"] == 1
    assert m["rollout/solver/zero_variance_groups"] == 1 and m["rollout/solver/groups"] == 2
    assert m["rollout/extractor/zero_variance_groups"] == 0
    assert m["rollout/solver/task_type/pick_heat_then_place_in_recep/reward_mean"] == \
        pytest.approx(2 / 3)
    assert m["rollout/status/completed"] == 6 and m["rollout/status/truncated"] == 2
    assert m["rollout/solver/truncated_frac"] == pytest.approx(2 / 5)
    assert m["rollout/pipeline/wall_s"] == 12.5 and m["rollout/time_s"] == 30.0
    assert m["rollout/x"] == 1  # slime's own metrics are kept


def test_eval_logger_emits_protocol_metrics(slime_args, emitted):
    metrics = {"eval/valid_unseen/success_with_skill": 0.75}
    data = {"valid_unseen": {"rewards": [], "truncated": [], "samples": []}}
    assert slime_hooks.log_eval_rollout(4, slime_args, data, metrics) is True
    assert emitted == [(4, "eval/step", metrics)]
    assert slime_args.logged_eval_rollout_id == 4


def test_loggers_without_a_sink_only_log_and_record_the_rollout_id(
        slime_args, slime_types, fake_pipeline, emitted):
    """slime's plugin contract probes the loggers with a bare args object (no sink flags) and
    expects `logged_rollout_id` / `logged_eval_rollout_id` set, as its reference loggers do."""
    slime_args.use_tensorboard = False
    output = _rollout(slime_args, slime_types)
    assert slime_hooks.log_rollout(3, slime_args, _flat(output), output.metrics, 1.0) is True
    assert slime_args.logged_rollout_id == 3
    bare = type("Args", (), {})()
    assert slime_hooks.log_eval_rollout(4, bare, {}, {"acc": 1.0}) is True
    assert bare.logged_eval_rollout_id == 4
    assert emitted == []


def test_pipeline_failure_propagates(slime_args, slime_types, fake_pipeline, monkeypatch):
    import sys

    async def broken(ctx, rows, *, rollout_id=None):
        raise ConnectionError("env server at 127.0.0.1:8100 died mid-rollout")

    monkeypatch.setattr(sys.modules["evolving_rl.pipeline.rollout"], "run_training_rollout",
                        broken)
    with pytest.raises(ConnectionError, match="died mid-rollout"):
        _rollout(slime_args, slime_types)


def test_empty_rollout_is_refused(slime_args, slime_types, fake_pipeline, monkeypatch):
    import sys

    from slime_fixtures import FakeOutcome

    async def empty(ctx, rows, *, rollout_id=None):
        return FakeOutcome([], {})

    monkeypatch.setattr(sys.modules["evolving_rl.pipeline.rollout"], "run_training_rollout",
                        empty)
    with pytest.raises(ValueError, match="no trainable samples"):
        _rollout(slime_args, slime_types)


def test_roles_use_the_pipeline_enum():
    assert {r.value for r in Role} == {"solver", "extractor"}
