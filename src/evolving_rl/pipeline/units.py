"""Records of one training rollout, shared by `rollout`, `assembly` and `metrics`.

Owns `SourceUnit` (one source task and everything the rollout produced from it: its source
episode, its N extractions, its retrieved tasks and its downstream episodes by grid flat index),
`Student` (under `pipeline.skill_use: teacher`, one no-skill episode on a retrieved task and
its teacher log-probs per card) and `Retrieved` (the batch's one retrieval answer: the tasks
found for every source task, or why the request failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.episode import EpisodeResult
from evolving_rl.pipeline.extraction import Extraction


@dataclass
class Retrieved:
    """Retrieved tasks per source task, or why retrieval failed."""

    tasks: list[list[TaskSpec]]
    error: str | None = None
    unknown_ids: int = 0


@dataclass
class Student:
    """A no-skill episode on retrieved task `rank`, and per skill index the log-probs of its
    response tokens with that skill's card in the prompt (0.0 off the loss mask) and their mean
    log-ratio to the sampled ones (set once, when scored)."""

    rank: int
    repeat: int
    result: EpisodeResult
    teacher: dict[int, list[float]] = field(default_factory=dict)
    # per skill index: mean of teacher - sampled log-prob over its trained tokens (`core.teaching`)
    log_ratios: dict[int, float] = field(default_factory=dict)
    score_failures: int = 0


@dataclass
class SourceUnit:
    """One source task and everything the rollout produced from it."""

    position: int
    task: TaskSpec
    source: EpisodeResult
    extractions: list[Extraction] = field(default_factory=list)
    retrieved: list[TaskSpec] = field(default_factory=list)
    downstream: dict[int, EpisodeResult] = field(default_factory=dict)  # grid flat index
    students: list[Student] = field(default_factory=list)  # skill_use: teacher

    @property
    def key(self) -> str:
        """Unique within a rollout even when a task appears twice in the batch."""
        return f"{self.position}:{self.task.id}"
