"""Our options on the slime path: where the config comes from and which slime args must agree.

slime silently ignores unknown CLI flags, so our options never travel as flags. They come through
`--custom-config-path x.yaml`, whose top-level keys slime copies onto `args`; that YAML carries one
key, `evolving_rl_config: <path of our config YAML>`, validated here with `load_config`. A missing
key or an invalid config raises `ConfigError`.

`check_slime_args` then refuses a slime command line that would silently break our contract
(advantages renormalised, the role channel overwritten, a different clip range or optimiser
than our config, per-rollout instead of token-level mean, ...). It raises `SlimeArgsError` with
every problem at once.
"""

from __future__ import annotations

import math
from argparse import Namespace
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from evolving_rl.config import Config, ConfigError, load_config
from evolving_rl.pipeline.types import Role

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
class RoleCoefficients:
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


def role_coefficients(config: Config) -> dict[Role, RoleCoefficients]:
    """The per-role loss coefficients of our config."""
    loss = config.loss
    return {role: RoleCoefficients(kl=getattr(loss.kl_coef, role.value),
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
        ("use_opd", False, "teacher_log_probs carries our role channel"),
        ("kl_coef", 0.0, "KL belongs in the loss (--use-kl-loss), not in the reward"),
        ("kl_loss_type", "low_var_kl", "our loss uses the low-variance (k3) estimator"),
        ("use_kl_loss", needs_ref, "reference log-probs exist only with --use-kl-loss"),
        ("calculate_per_token_loss", True, "the objective is a token-level mean"),
        ("n_samples_per_prompt", 1, "the pipeline expands each source task itself"),
        ("rollout_batch_size", config.pipeline.source_tasks_per_rollout,
         "config pipeline.source_tasks_per_rollout"),
        ("rollout_top_p", 1.0, "top-p replay is not carried by our samples"),
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
    for name, expected, why in _expected_args(config):
        actual = getattr(args, name, None)
        if not _same(actual, expected):
            problems.append(f"--{name.replace('_', '-')}: is {actual!r}, need {expected!r} ({why})")
    if problems:
        listing = "\n  ".join(problems)
        raise SlimeArgsError(f"slime args incompatible with evolving_rl:\n  {listing}")


def _same(actual: object, expected: object) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return bool(actual) == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12)
    return actual == expected
