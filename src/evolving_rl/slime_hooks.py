"""The only module slime's command line names: thin hooks over `evolving_rl.slime_bridge`.

    --rollout-function-path                       <M>.generate_rollout
    --custom-convert-samples-to-train-data-path   <M>.convert_samples_to_train_data
    --custom-reward-post-process-path             <M>.post_process_rewards  (optional, see below)
    --custom-rollout-log-function-path            <M>.log_rollout
    --custom-eval-rollout-log-function-path       <M>.log_eval_rollout
    --loss-type custom_loss --custom-loss-function-path <M>.policy_loss
    --custom-config-path <yaml holding `evolving_rl_config: <our config YAML>`>

with <M> = evolving_rl.slime_hooks. slime calls the reward post-process only from its own train-data
conversion, which ours replaces; ours reuses the same function, so the flag is harmless.

Signatures are those of slime's call sites at the pinned commit 624b824a.

Why a rollout function and not a custom generate hook. One source task is one unit of work whose
samples depend on each other: its episode feeds N extractions, retrieval picks K other tasks, the
K×N×R downstream episodes score the extractions, and the GRPO groups (extractor group per source
task, solver group per downstream task) are explicit and of variable size once failed samples are
removed. A generate hook is called per data-source sample, and on recent slime the samples it
returns together form one "compact rollout": they must share a `rollout_id` and are pooled into one
token-mean counted as one rollout, which would merge extractor and solver samples of different
groups; slime's reward normalisation would then chunk by `n_samples_per_prompt` or silently treat
the batch as one group. The rollout function receives the whole batch of source tasks, runs the
four stages with the pipeline's own concurrency bounds, computes rewards and advantages over our
explicit groups, and returns one list per group (depth two, which slime accepts without
`rollout_id`). The convert hook then owns the train data: advantages as they are, each sample's
role (and a student's teacher) for the loss, and one optimiser step per rollout.

Evaluation (`evaluation=True`) runs the pipeline's eval protocol on each `--eval-prompt-data`
dataset. Its per-dataset data lists are empty (the protocol reports metrics, not trainable
samples), so our eval logger, which `check_slime_args` requires, reports them.

slime's own plugin contract tests against these hooks, from the root of a slime checkout at the
pin (the tests read slime's sources by relative path) with this project importable. The eval
function is named too: slime defaults `--eval-function-path` to the rollout function
(slime/utils/arguments.py:1968-1969), so ours is what slime evaluates with:

    cd <slime> && M=evolving_rl.slime_hooks && PYTHONPATH=<project>/src:. \
    SLIME_CONTRACT_ROLLOUT_FUNCTION_PATH=$M.generate_rollout \
    SLIME_CONTRACT_EVAL_FUNCTION_PATH=$M.generate_rollout \
    SLIME_CONTRACT_CUSTOM_ROLLOUT_LOG_FUNCTION_PATH=$M.log_rollout \
    SLIME_CONTRACT_CUSTOM_EVAL_ROLLOUT_LOG_FUNCTION_PATH=$M.log_eval_rollout \
    SLIME_CONTRACT_CUSTOM_REWARD_POST_PROCESS_PATH=$M.post_process_rewards \
    SLIME_CONTRACT_CUSTOM_CONVERT_SAMPLES_TO_TRAIN_DATA_PATH=$M.convert_samples_to_train_data \
    python -m pytest tests/plugin_contracts

The tests that fail, and why each is only the probe's synthetic assumption, are recorded in
tests/slime/test_hook_contracts.py; tests/slime_upstream/test_plugin_contracts.py runs them so on
every commit; docs/design.md §5.5 has the counts.
"""

from __future__ import annotations

import logging
from argparse import Namespace
from typing import Any

from evolving_rl.slime_bridge import samples as sample_bridge
from evolving_rl.slime_bridge import slime_api, train_data
from evolving_rl.slime_bridge.loss import custom_policy_loss
from evolving_rl.slime_bridge.metrics import eval_metrics, rollout_metrics
from evolving_rl.slime_bridge.runtime import Runtime, eval_datasets, get_runtime, training_rows
from evolving_rl.slime_bridge.settings import check_slime_args, load_run_config

logger = logging.getLogger(__name__)


def generate_rollout(args: Namespace, rollout_id: int, data_source: Any,
                     evaluation: bool = False) -> Any:
    """One training rollout (RolloutFnTrainOutput) or one evaluation (RolloutFnEvalOutput)."""
    runtime = get_runtime(args)
    if evaluation:
        return _evaluate(args, runtime)
    from evolving_rl.pipeline.rollout import run_training_rollout

    rows = training_rows(data_source, args.rollout_batch_size)
    outcome = runtime.loop.run(
        run_training_rollout(runtime.context, rows, rollout_id=rollout_id))
    groups = sample_bridge.to_slime_groups(outcome.samples, slime_api.sample_class())
    logger.info("rollout %d: %d source tasks -> %d samples in %d groups", rollout_id, len(rows),
                sum(len(group) for group in groups), len(groups))
    return slime_api.train_output(groups, dict(outcome.metrics))


def _evaluate(args: Namespace, runtime: Runtime) -> Any:
    from evolving_rl.pipeline.evaluation import run_eval

    per_dataset = {name: runtime.loop.run(run_eval(runtime.context, rows))
                   for name, rows in eval_datasets(args).items()}
    data = {name: {"rewards": [], "truncated": [], "samples": []} for name in per_dataset}
    return slime_api.eval_output(data, eval_metrics(per_dataset))


def post_process_rewards(args: Namespace, samples: list[Any]) -> tuple[list[float], list[float]]:
    """(raw rewards, our GRPO advantages): slime must not renormalise our explicit groups."""
    return sample_bridge.post_process_rewards(samples)


def convert_samples_to_train_data(args: Namespace, samples: list[Any]) -> dict[str, Any]:
    """slime train data carrying each token's role and teacher to the loss (see
    `slime_bridge.train_data`)."""
    return train_data.convert_samples_to_train_data(samples, args.global_batch_size,
                                                    getattr(args, "rollout_top_p", 1.0))


def log_rollout(rollout_id: int, args: Namespace, samples: list[Any],
                rollout_extra_metrics: dict[str, Any] | None, rollout_time: float) -> bool:
    """Log our per-role metrics with slime's own; True tells slime not to log again. Records
    `args.logged_rollout_id`, as slime's reference logger does (its plugin contract)."""
    metrics = rollout_metrics(samples, rollout_extra_metrics, rollout_time)
    metrics |= slime_api.default_rollout_metrics(args, samples, rollout_time)
    logger.info("rollout %d metrics: %s", rollout_id, metrics)
    _emit(args, metrics, rollout_id, step_key="rollout/step")
    args.logged_rollout_id = rollout_id
    return True


def log_eval_rollout(rollout_id: int, args: Namespace, data: dict[str, Any],
                     extra_metrics: dict[str, Any] | None) -> bool:
    """Log the eval protocol's metrics; True tells slime not to log its (empty) per-sample view.
    Records `args.logged_eval_rollout_id`, as slime's reference logger does."""
    metrics = dict(extra_metrics or {})
    logger.info("eval %d metrics: %s", rollout_id, metrics)
    _emit(args, metrics, rollout_id, step_key="eval/step")
    args.logged_eval_rollout_id = rollout_id
    return True


def _emit(args: Namespace, metrics: dict[str, Any], rollout_id: int, step_key: str) -> None:
    """Send metrics to slime's sinks when its args enable one (the flags slime's own `log` reads,
    slime/observability/logging_utils.py:45-50); without one the text log above is all."""
    if getattr(args, "use_wandb", False) or getattr(args, "use_tensorboard", False):
        slime_api.emit_metrics(args, metrics, rollout_id, step_key=step_key)


def policy_loss(args: Namespace, batch: dict[str, Any], logits: Any,
                sum_of_sample_mean: Any) -> tuple[Any, dict[str, Any]]:
    """PPO-clip with per-role KL and entropy coefficients, distilling student tokens (see
    `slime_bridge.loss`)."""
    config = load_run_config(args)
    check_slime_args(args, config)
    return custom_policy_loss(args, batch, logits, sum_of_sample_mean, config)
