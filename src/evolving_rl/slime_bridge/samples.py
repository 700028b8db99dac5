"""Our `TrainSample`s as slime `Sample`s, and back to what the later hooks need.

Owns the mapping onto slime's `Sample` (pinned commit 624b824a):
  - `tokens` = prompt ids + response ids, `response_length` = len(response ids), and `loss_mask` /
    `rollout_log_probs` exactly as sampled (observation tokens mask 0, log-prob 0.0);
  - `rollout_top_p_token_ids` / `rollout_top_p_token_offsets` = the response-aligned nucleus as
    int lists (slime/utils/types.py:122-125; empty spans on observation tokens), None without
    top-p replay;
  - `teacher_log_probs` (slime's own field for on-policy distillation, slime/utils/types.py:128)
    = a student's teacher log-probs under `pipeline.skill_use: teacher` (one per response token),
    None otherwise; `train_data` checks and encodes them into the loss's channel;
  - `prefix_cache_info` = SGLang's prompt and cached token counts summed over the calls that
    sampled the response (slime's `rollout/prefix_cache_hit_rate`);
  - `reward` = the raw reward; `status` COMPLETED or TRUNCATED (failed samples never get here);
  - `group_index` = position of the sample's GRPO group in this rollout, `index` = running index;
  - `metadata` = the pipeline's metadata plus our `SampleTag` under `TAG_KEY` (role, explicit group
    id, the pipeline's advantage — already group-normalised and role-weighted — and status).
slime never reads our tag; our reward post-process, train-data conversion and loggers do. Samples
are returned as one list per GRPO group (depth two), the shape slime's rollout validator accepts
without requiring a `rollout_id`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus, TrainSample

TAG_KEY = "evolving_rl"


class ForeignSampleError(ValueError):
    """A slime sample that our rollout function did not produce (no tag in its metadata)."""


@dataclass(frozen=True)
class SampleTag:
    """What our hooks need to know about one slime sample."""

    role: Role
    group_id: str
    advantage: float
    status: SampleStatus

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "role": self.role.value, "status": self.status.value}

    @staticmethod
    def of(sample: Any) -> SampleTag:
        """The tag of a slime sample; `ForeignSampleError` when it has none."""
        raw = (getattr(sample, "metadata", None) or {}).get(TAG_KEY)
        if not isinstance(raw, dict):
            raise ForeignSampleError(
                f"sample index={getattr(sample, 'index', None)} has no '{TAG_KEY}' tag: only "
                "samples from evolving_rl.slime_hooks.generate_rollout can be trained on")
        return SampleTag(role=Role(raw["role"]), group_id=str(raw["group_id"]),
                         advantage=float(raw["advantage"]), status=SampleStatus(raw["status"]))


def to_slime_sample(sample: TrainSample, sample_cls: type, *, index: int, group_index: int) -> Any:
    """One slime `Sample` from one trainable `TrainSample`."""
    if not sample.status.trainable:
        raise ValueError(f"sample of group {sample.group_id} has status {sample.status.value}; "
                         "the pipeline must remove failed samples before handing them to slime")
    if sample.response_length == 0 or sample.reward is None:
        raise ValueError(f"sample of group {sample.group_id} is empty or unscored")
    if TAG_KEY in sample.metadata:
        raise ValueError(f"pipeline metadata must not use the reserved key '{TAG_KEY}'")
    tag = SampleTag(role=Role(sample.role), group_id=sample.group_id,
                    advantage=float(sample.advantage), status=sample.status)
    status = sample_cls.Status.TRUNCATED if sample.status is SampleStatus.TRUNCATED \
        else sample_cls.Status.COMPLETED
    nucleus, teacher = sample.nucleus, sample.teacher_log_probs
    slime_sample = sample_cls(
        group_index=group_index, index=index, tokens=list(sample.tokens),
        response_length=sample.response_length, reward=float(sample.reward),
        loss_mask=list(sample.loss_mask), rollout_log_probs=list(sample.log_probs),
        rollout_top_p_token_ids=list(nucleus.token_ids) if nucleus else None,
        rollout_top_p_token_offsets=list(nucleus.offsets) if nucleus else None,
        teacher_log_probs=list(teacher) if teacher is not None else None,
        status=status, metadata={**sample.metadata, TAG_KEY: tag.to_dict()})
    # slime's own reader of SGLang's counts (slime/utils/types.py:202-205), fed their sums
    slime_sample.prefix_cache_info.add({"prompt_tokens": sample.prefix_cache.prompt_tokens,
                                        "cached_tokens": sample.prefix_cache.cached_tokens})
    return slime_sample


def to_slime_groups(samples: Sequence[TrainSample], sample_cls: type) -> list[list[Any]]:
    """slime samples grouped by explicit group id, in order of first appearance."""
    if not samples:
        raise ValueError("the rollout produced no trainable samples; slime needs at least one")
    order: dict[str, list[TrainSample]] = {}
    for sample in samples:
        order.setdefault(sample.group_id, []).append(sample)
    groups, index = [], 0
    for group_index, members in enumerate(order.values()):
        group = []
        for member in members:
            group.append(to_slime_sample(member, sample_cls, index=index, group_index=group_index))
            index += 1
        groups.append(group)
    return groups


def flatten(samples: Iterable[Any]) -> list[Any]:
    """slime passes a flat list to the later hooks; accept one level of nesting too."""
    flat: list[Any] = []
    for item in samples:
        flat.extend(item if isinstance(item, list) else [item])
    return flat


def post_process_rewards(samples: Iterable[Any]) -> tuple[list[float], list[float]]:
    """(raw rewards, our advantages): slime trains on the second list without renormalising."""
    flat = flatten(samples)
    tags = [SampleTag.of(sample) for sample in flat]
    return [float(sample.reward) for sample in flat], [tag.advantage for tag in tags]
