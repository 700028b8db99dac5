"""Our options on the slime path: where the config comes from and which slime args must agree.

slime silently ignores unknown CLI flags, so our options never travel as flags. They come through
`--custom-config-path x.yaml`, whose top-level keys slime copies onto `args`; that YAML carries one
key, `evolving_rl_config: <path of our config YAML>`, validated here with `load_config`. A missing
key or an invalid config raises `ConfigError`.

`config_flags` is the one source of the slime flags our side decides: the launch prints them
(`python -m evolving_rl.slime_bridge.args`), and `check_slime_args` then refuses a slime command
line that would silently break our contract (advantages renormalised, the role channel
overwritten, a different clip range or optimiser than our config, per-rollout instead of
token-level mean, ...). It raises `SlimeArgsError` with
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


@dataclass(frozen=True)
class SlimeFlag:
    """One slime flag our side decides: its value (True: a switch), the attribute slime's parser
    stores it in, and where the value comes from."""

    flag: str
    value: object
    source: str

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    def argv(self) -> list[str]:
        if self.value is True:
            return [self.flag]
        return [self.flag, flag_text(self.value)]


def flag_text(value: object) -> str:
    """A flag value as the command line gives it (floats round-trip exactly)."""
    return repr(value) if isinstance(value, float) else str(value)


def _contract_flags(config: Config) -> list[SlimeFlag]:
    """Flags our hooks' contract fixes, whatever the config (the module doc says why)."""
    hooks = [SlimeFlag("--" + dest.replace("_", "-"), path, "our hooks work together")
             for dest, path in HOOK_PATHS.items()]
    needs_ref = any(c.kl > 0 for c in role_coefficients(config).values())
    kl = [SlimeFlag("--use-kl-loss", True, "a role has loss.kl_coef > 0")] if needs_ref else []
    return hooks + [
        SlimeFlag("--loss-type", "custom_loss", "our loss carries per-role coefficients"),
        SlimeFlag("--advantage-estimator", "grpo", "our GRPO advantages, unchanged"),
        SlimeFlag("--kl-loss-type", "low_var_kl", "our loss uses the k3 estimator"),
        SlimeFlag("--calculate-per-token-loss", True, "the objective is a token-level mean"),
        SlimeFlag("--n-samples-per-prompt", 1, "the pipeline expands each source task itself"),
        SlimeFlag("--num-steps-per-rollout", 1, "one optimiser step per rollout"),
        SlimeFlag("--use-dynamic-batch-size", True, "sample counts vary per rollout"),
        *kl,
    ]


def config_flags(config: Config) -> list[SlimeFlag]:
    """Every flag of slime's command line that the config or the hooks' contract decides."""
    loss, sampling = config.loss, config.sampling
    entropy_switch = int(any(c.entropy != 0 for c in role_coefficients(config).values()))
    return _contract_flags(config) + [
        SlimeFlag("--rollout-batch-size", config.pipeline.source_tasks_per_rollout,
                  "pipeline.source_tasks_per_rollout"),
        # One seed a run: slime's --seed (Megatron's init, SGLang's random_seed) and
        # --rollout-seed (the order --rollout-shuffle gives the source tasks), whose defaults
        # 1234 and 42 would make every "seed" of a comparison the same run.
        SlimeFlag("--seed", config.run.seed, "run.seed"),
        SlimeFlag("--rollout-seed", config.run.seed, "run.seed"),
        SlimeFlag("--rollout-temperature", sampling.solver.temperature,
                  "sampling.solver.temperature"),
        SlimeFlag("--rollout-top-p", sampling.solver.top_p, "sampling.solver.top_p"),
        SlimeFlag("--entropy-coef", entropy_switch,
                  "1 when a role has loss.entropy_coef != 0 (a switch: settings.py)"),
        SlimeFlag("--eps-clip", loss.clip_eps_low, "loss.clip_eps_low"),
        SlimeFlag("--eps-clip-high", loss.clip_eps_high, "loss.clip_eps_high"),
        SlimeFlag("--lr", loss.lr, "loss.lr"),
        SlimeFlag("--adam-beta1", loss.adam_beta1, "loss.adam_beta1"),
        SlimeFlag("--adam-beta2", loss.adam_beta2, "loss.adam_beta2"),
        SlimeFlag("--weight-decay", loss.weight_decay, "loss.weight_decay"),
        SlimeFlag("--clip-grad", loss.grad_clip, "loss.grad_clip"),
    ]


# Generated flags checked otherwise: slime turns --num-steps-per-rollout into the global batch
# size (checked below), any non-zero --entropy-coef is a valid switch (`_entropy_gradient_problems`)
# and --use-kl-loss must also be absent without a KL term.
CHECKED_APART = ("num_steps_per_rollout", "entropy_coef", "use_kl_loss")


def _expected_args(config: Config) -> list[tuple[str, object, str]]:
    """(slime attribute, required value, why) for every arg the hooks rely on: the flags the
    launch generates (`config_flags`), plus slime defaults that must stay as they are."""
    needs_ref = any(c.kl > 0 for c in role_coefficients(config).values())
    global_batch = config.pipeline.source_tasks_per_rollout
    return [(flag.dest, flag.value, f"config {flag.source}") for flag in config_flags(config)
            if flag.dest not in CHECKED_APART] + [
        ("normalize_advantages", False, "slime would re-whiten our group advantages"),
        ("use_opd", False,
         "teacher_log_probs carries our role channel (role codes and student teachers "
         "encoded); slime's OPD would read those codes as teacher log-probs and shift every "
         "advantage by them. Our loss distils student tokens itself (loss.distill_coef)"),
        ("kl_coef", 0.0, "KL belongs in the loss (--use-kl-loss), not in the reward"),
        ("use_kl_loss", needs_ref, "reference log-probs exist only with --use-kl-loss"),
        ("global_batch_size", global_batch,
         "one optimiser step per rollout: --rollout-batch-size x --n-samples-per-prompt, as "
         "--num-steps-per-rollout 1 derives it"),
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
    if config.loss.distill_calibration_steps:
        problems.append("config loss.distill_calibration_steps: the local backend's alone; "
                        "slime's loss takes the fixed loss.distill_coef (set it to 0)")
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
