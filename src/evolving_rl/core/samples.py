"""Training samples: the record both backends train on, and how producing one ended.

`TrainSample` is what both backends train on (slime's `Sample` is built from it in the hooks,
the local trainer consumes it directly). Token ids and log-probs are exactly the sampled ones;
under top-p replay (the slime path) `nucleus` holds the kept ids of every response token. Under
`pipeline.skill_use: teacher` a student episode also carries `teacher_log_probs`: per response
token, the skill-conditioned policy's log-prob of that token (docs/design.md §4.6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evolving_rl.core.nucleus import Nucleus
from evolving_rl.core.roles import Role
from evolving_rl.core.strenum import StrEnum


class SampleStatus(StrEnum):
    """Outcome of producing one sample; anything but COMPLETED/TRUNCATED has zero loss weight."""

    COMPLETED = "completed"
    TRUNCATED = "truncated"  # hit max_steps or a token cap; still trainable
    CONTEXT_OVERFLOW = "context_overflow"
    POLICY_ERROR = "policy_error"
    ENV_ERROR = "env_error"
    ABORTED = "aborted"
    EMPTY = "empty"

    @property
    def trainable(self) -> bool:
        return self in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)


@dataclass(frozen=True)
class PrefixCacheCounts:
    """SGLang's prefix-cache counts over generation calls: the prompt tokens sent and how many of
    them its radix cache served (`meta_info.prompt_tokens` / `cached_tokens` of each answer). slime
    sums them into `rollout/prefix_cache_hit_rate` (slime/observability/rollout_metrics.py:202)."""

    prompt_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: PrefixCacheCounts) -> PrefixCacheCounts:
        return PrefixCacheCounts(self.prompt_tokens + other.prompt_tokens,
                           self.cached_tokens + other.cached_tokens)


@dataclass
class TrainSample:
    """One training sample: prompt ids + response ids with a mask and sampled log-probs.

    `loss_mask` and `log_probs` have exactly `len(response_ids)` entries; observation tokens
    inside the response carry mask 0 and log-prob 0.0. `nucleus`, when recorded, has one span per
    response token: the sampled nucleus on generated tokens, an empty span on the others.
    `teacher_log_probs`, when present, has one entry per response token too (0.0 off the mask).
    `prefix_cache` sums the generation calls that sampled the response (zero off SGLang).
    """

    role: Role
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    log_probs: list[float]
    reward: float | None
    group_id: str
    status: SampleStatus = SampleStatus.COMPLETED
    advantage: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    nucleus: Nucleus | None = None
    teacher_log_probs: list[float] | None = None
    prefix_cache: PrefixCacheCounts = PrefixCacheCounts()

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.log_probs) != n:
            raise ValueError(
                f"misaligned sample: {n} response ids, {len(self.loss_mask)} mask entries, "
                f"{len(self.log_probs)} log-probs")
        if self.nucleus is not None and self.nucleus.n_tokens != n:
            raise ValueError(f"misaligned sample: {n} response ids, a nucleus of "
                             f"{self.nucleus.n_tokens} spans")
        if self.teacher_log_probs is not None and len(self.teacher_log_probs) != n:
            raise ValueError(f"misaligned sample: {n} response ids, "
                             f"{len(self.teacher_log_probs)} teacher log-probs")

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def response_length(self) -> int:
        return len(self.response_ids)
