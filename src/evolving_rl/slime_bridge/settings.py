"""Our options on the slime path: where the config comes from and which slime args must agree.

slime silently ignores unknown CLI flags, so our options never travel as flags. They come through
`--custom-config-path x.yaml`, whose top-level keys slime copies onto `args`; that YAML carries one
key, `evolving_rl_config: <path of our config YAML>`, validated here with `load_config`. A missing
key or an invalid config raises `ConfigError`.

`check_slime_args` then refuses a slime command line that would silently break our contract
(advantages renormalised, the role channel overwritten, a different clip range or optimiser
than our config, per-rollout instead of token-level mean, ...). It raises `SlimeArgsError` with
every problem at once. Two of its rules guard slime behaviour that fails silently or late (slime
pinned at 624b824a):

- Entropy gradient. slime computes the entropy with a gradient only when `--entropy-coef` != 0
  (slime/backends/megatron_utils/loss.py:551, else `mark_non_differentiable`,
  slime/utils/ppo_utils.py:277-278). Our loss applies config `loss.entropy_coef` per role, so any
  non-zero role coefficient needs a non-zero `--entropy-coef` (a switch: with `--loss-type
  custom_loss` slime reads its value nowhere else; loss.py:1114 is slime's own policy loss).
- Batching. Our sample count varies per rollout. slime's static micro-batching asserts that each
  step's sample count is a multiple of its micro-batch layout (slime/utils/dp_schedule.py:169-185),
  so `--use-dynamic-batch-size` is required. The convert hook makes exactly one optimiser step per
  rollout for any `--global-batch-size` (see `train_data`), but slime sizes its LR schedule and step
  counter as `rollout_batch_size * n_samples_per_prompt // global_batch_size` steps per rollout
  (slime/backends/megatron_utils/model.py:203, slime/observability/metric_utils.py:122), so
  `--global-batch-size` must equal `rollout_batch_size * n_samples_per_prompt`, which is what
  `--num-steps-per-rollout 1` derives (slime/utils/arguments.py:1971-1979).
"""

from __future__ import annotations

import math
from argparse import Namespace
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from evolving_rl.config import Config, ConfigError, load_config
from evolving_rl.core.roles import Role

CONFIG_KEY = "evolving_rl_config"
HOOKS_MODULE = "evolving_rl.slime_hooks"
HOOK_PATHS = {
    "rollout_function_path": f"{HOOKS_MODULE}.generate_rollout",
    "custom_convert_samples_to_train_data_path": f"{HOOKS_MODULE}.convert_samples_to_train_data",
    "custom_loss_function_path": f"{HOOKS_MODULE}.policy_loss",
    "custom_rollout_log_function_path": f"{HOOKS_MODULE}.log_rollout",
    "custom_eval_rollout_log_function_path": f"{HOOKS_MODULE}.log_eval_rollout",
}


class SlimeArgsError(ValueError):
    """slime's args contradict our config or a contract the hooks rely on."""


@dataclass(frozen=True)
class LossCoefficients:
    """KL and entropy coefficients of one role in the loss."""

    kl: float
    entropy: float


def load_run_config(args: Namespace) -> Config:
    """Our validated config, named by `args.evolving_rl_config` (set by `--custom-config-path`)."""
    path = getattr(args, CONFIG_KEY, None)
    if not path:
        raise ConfigError(
            CONFIG_KEY,
            "missing on slime's args: pass --custom-config-path <yaml> whose top-level key "
            f"'{CONFIG_KEY}' names our config file (slime ignores unknown flags)",
            getattr(args, "custom_config_path", None))
    return _load_cached(str(Path(path).resolve()))


@lru_cache(maxsize=4)
def _load_cached(path: str) -> Config:
    return load_config(path)


def role_coefficients(config: Config) -> dict[Role, LossCoefficients]:
    """The per-role loss coefficients of our config."""
    loss = config.loss
    return {role: LossCoefficients(kl=getattr(loss.kl_coef, role.value),
                                   entropy=getattr(loss.entropy_coef, role.value))
            for role in Role}


def _expected_args(config: Config) -> list[tuple[str, object, str]]:
    """(slime attribute, required value, why) for every arg the hooks rely on."""
    loss, sampling = config.loss, config.sampling
    needs_ref = any(c.kl > 0 for c in role_coefficients(config).values())
    hooks = [(name, path, "our hooks work together") for name, path in HOOK_PATHS.items()]
    return hooks + [
        ("loss_type", "custom_loss", "our loss carries per-role coefficients"),
        ("advantage_estimator", "grpo", "advantages must be our GRPO advantages, unchanged"),
        ("normalize_advantages", False, "slime would re-whiten our group advantages"),
        ("use_opd", False,
         "teacher_log_probs carries our role channel (role codes and student teachers "
         "encoded); slime's OPD would read those codes as teacher log-probs and shift every "
         "advantage by them. Our loss distils student tokens itself (loss.distill_coef)"),
        ("kl_coef", 0.0, "KL belongs in the loss (--use-kl-loss), not in the reward"),
        ("kl_loss_type", "low_var_kl", "our loss uses the low-variance (k3) estimator"),
        ("use_kl_loss", needs_ref, "reference log-probs exist only with --use-kl-loss"),
        ("calculate_per_token_loss", True, "the objective is a token-level mean"),
        ("n_samples_per_prompt", 1, "the pipeline expands each source task itself"),
        ("rollout_batch_size", config.pipeline.source_tasks_per_rollout,
         "config pipeline.source_tasks_per_rollout"),
        ("global_batch_size", config.pipeline.source_tasks_per_rollout,
         "one optimiser step per rollout: --rollout-batch-size x --n-samples-per-prompt, as "
         "--num-steps-per-rollout 1 derives it"),
        ("use_dynamic_batch_size", True,
         "sample counts vary per rollout; static micro-batches need a fixed multiple"),
        ("rollout_top_p", sampling.solver.top_p,
         "config sampling.solver.top_p; below 1 the samples carry the nucleus slime replays"),
        ("rollout_temperature", sampling.solver.temperature,
         "slime recomputes log-probs at --rollout-temperature; config sampling.solver"),
        ("eps_clip", loss.clip_eps_low, "config loss.clip_eps_low"),
        ("eps_clip_high", loss.clip_eps_high, "config loss.clip_eps_high"),
        ("lr", loss.lr, "config loss.lr"),
        ("adam_beta1", loss.adam_beta1, "config loss.adam_beta1"),
        ("adam_beta2", loss.adam_beta2, "config loss.adam_beta2"),
        ("weight_decay", loss.weight_decay, "config loss.weight_decay"),
        ("clip_grad", loss.grad_clip, "config loss.grad_clip"),
    ]


def check_slime_args(args: Namespace, config: Config) -> None:
    """Raise `SlimeArgsError` listing every slime arg that breaks our contract."""
    problems = []
    if config.sampling.solver.temperature != config.sampling.extractor.temperature:
        problems.append("config sampling.solver and sampling.extractor temperatures differ, but "
                        "slime recomputes every log-prob at the one --rollout-temperature")
    if config.sampling.solver.top_p != config.sampling.extractor.top_p:
        problems.append("config sampling.solver and sampling.extractor top_p differ, but slime "
                        "checks and replays every sample's nucleus under the one --rollout-top-p")
    for name, expected, why in _expected_args(config):
        actual = getattr(args, name, None)
        if not _same(actual, expected):
            problems.append(f"--{name.replace('_', '-')}: is {actual!r}, need {expected!r} ({why})")
    problems += _entropy_gradient_problems(args, config)
    if problems:
        listing = "\n  ".join(problems)
        raise SlimeArgsError(f"slime args incompatible with evolving_rl:\n  {listing}")


def _entropy_gradient_problems(args: Namespace, config: Config) -> list[str]:
    """A zero `--entropy-coef` while a role's entropy coefficient is not (see module doc)."""
    roles = [role.value for role, c in role_coefficients(config).items() if c.entropy != 0]
    actual = getattr(args, "entropy_coef", 0.0)  # slime's own default, loss.py:551
    if not roles or actual != 0:
        return []
    return [f"--entropy-coef: is {actual!r}, need a non-zero value (e.g. 1): slime detaches the "
            "entropy when it is 0 (slime/backends/megatron_utils/loss.py:551), so config "
            f"loss.entropy_coef of {', '.join(roles)} would get no gradient; with --loss-type "
            "custom_loss slime uses the value for nothing else, our loss applies the per-role "
            "coefficients"]


def _same(actual: object, expected: object) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return bool(actual) == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12)
    return actual == expected
