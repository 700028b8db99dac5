"""Every use of slime itself, imported lazily: slime is only importable inside its Ray job.

Owns the seam between our bridge and slime's classes and helpers (pinned commit 624b824a):
`Sample`, the rollout-function output types, slime's per-token log-prob/entropy computation for the
loss, its default rollout metrics and its metric sink. Tests replace these functions with stand-ins
(or use the real ones when slime is importable); nothing else in the project imports slime.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any


def sample_class() -> type:
    """slime's `Sample` dataclass."""
    from slime.utils.types import Sample

    return Sample


def train_output(samples: list[list[Any]], metrics: dict[str, Any]) -> Any:
    """slime's `RolloutFnTrainOutput(samples, metrics)`."""
    from slime.rollout.base_types import RolloutFnTrainOutput

    return RolloutFnTrainOutput(samples=samples, metrics=metrics)


def eval_output(data: dict[str, dict[str, Any]], metrics: dict[str, Any]) -> Any:
    """slime's `RolloutFnEvalOutput(data, metrics)`."""
    from slime.rollout.base_types import RolloutFnEvalOutput

    return RolloutFnEvalOutput(data=data, metrics=metrics)


def log_probs_and_entropy(args: Namespace, batch: dict[str, Any], logits: Any) -> tuple[list, list]:
    """Per-sample response log-probs and entropies from the packed logits, as slime computes them
    (tensor-parallel vocab, context-parallel slices, rollout temperature, top-p replay)."""
    from slime.backends.megatron_utils.loss import (
        get_log_probs_and_entropy,
        get_rollout_top_p_logprob_kwargs,
    )

    _, out = get_log_probs_and_entropy(
        logits, args=args, unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"],
        with_entropy=True, **get_rollout_top_p_logprob_kwargs(args, batch))
    return out["log_probs"], out["entropy"]


def default_rollout_metrics(args: Namespace, samples: list[Any], rollout_time: float) -> dict:
    """slime's own rollout metrics (response lengths, truncation, perf), unprefixed groups."""
    from slime.observability.metric_utils import dict_add_prefix
    from slime.observability.rollout_metrics import (
        compute_metrics_from_samples,
        compute_perf_metrics_from_samples,
    )

    metrics = dict_add_prefix(compute_metrics_from_samples(args, samples), "rollout/")
    perf = compute_perf_metrics_from_samples(args, samples, rollout_time)
    return metrics | dict_add_prefix(perf, "perf/")


def emit_metrics(args: Namespace, metrics: dict[str, Any], rollout_id: int, step_key: str) -> None:
    """Send metrics to slime's sinks (wandb / tensorboard) at slime's step for `rollout_id`."""
    from slime.observability import logging_utils
    from slime.observability.metric_utils import compute_rollout_step

    logging_utils.log(args, {**metrics, step_key: compute_rollout_step(args, rollout_id)},
                      step_key=step_key)
