"""The N x K x R downstream grid of one source task: index arithmetic and GRPO group ids.

Per source task, N candidate skills (n), K retrieved tasks (k) and R repeats (r) give N*K*R
downstream episodes. Flat order is skill-major: idx = (n * K + k) * R + r, so the K*R episodes
of one skill are contiguous. GRPO groups (docs/design.md §4.1): the extractor group is the N
skills of one source task; the solver group for retrieved task k is its N*R episodes across
skills (same task, different skills); the optional source-episode samples form one solver group
per rollout (`SOURCE_GROUP_ID`); the plain GRPO baseline has one solver group per source task
(`baseline_group_id`); with one sample per step (Mind2Web) and step-index grouping,
each of these groups splits by step index (`step_group_id`). Samples carry a group's id; GRPO
groups them by `GroupKey`, the id with its role, so that group statistics know their role
without reading the id.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from evolving_rl.core.roles import Role

SOURCE_GROUP_ID = "solver-source"


class GroupKey(NamedTuple):
    """One GRPO group: the id its samples carry and the role they play."""

    role: Role
    group_id: str


class Cell(NamedTuple):
    skill: int
    task: int
    repeat: int


def _check_index(name: str, value: int, bound: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value < bound:
        raise IndexError(f"{name}={value} out of range [0, {bound})")


@dataclass(frozen=True)
class Grid:
    n_skills: int
    top_k: int
    n_repeats: int

    def __post_init__(self) -> None:
        for name in ("n_skills", "top_k", "n_repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    @property
    def size(self) -> int:
        return self.n_skills * self.top_k * self.n_repeats

    def index(self, skill: int, task: int, repeat: int) -> int:
        """Flat index of (skill n, retrieved task k, repeat r)."""
        _check_index("skill", skill, self.n_skills)
        _check_index("task", task, self.top_k)
        _check_index("repeat", repeat, self.n_repeats)
        return (skill * self.top_k + task) * self.n_repeats + repeat

    def coords(self, index: int) -> Cell:
        """Inverse of `index`."""
        _check_index("index", index, self.size)
        skill_task, repeat = divmod(index, self.n_repeats)
        skill, task = divmod(skill_task, self.top_k)
        return Cell(skill, task, repeat)

    def cells(self) -> Iterator[Cell]:
        """All cells in flat-index order."""
        return (self.coords(index) for index in range(self.size))

    def skill_episodes(self, skill: int) -> tuple[int, ...]:
        """Flat indices of skill n's K*R episodes (contiguous), the extractor's evidence."""
        start = self.index(skill, 0, 0)
        return tuple(range(start, start + self.top_k * self.n_repeats))

    def task_episodes(self, task: int) -> tuple[int, ...]:
        """Flat indices of retrieved task k's N*R episodes: one solver GRPO group."""
        return tuple(
            self.index(skill, task, repeat)
            for skill in range(self.n_skills)
            for repeat in range(self.n_repeats)
        )

    @property
    def solver_episodes_per_source(self) -> int:
        """Solver episodes the full method plays per source task: the source episode and the
        N*K*R downstream ones (the plain GRPO baseline's group size)."""
        return 1 + self.size

    def solver_group_ids(self, source_id: str) -> tuple[str, ...]:
        """The solver group id of every flat index, for source task `source_id`."""
        return tuple(solver_group_id(source_id, cell.task) for cell in self.cells())


def extractor_group_id(source_id: str) -> str:
    """Group of the N skills extracted from one source task."""
    return f"extractor/{source_id}"


def solver_group_id(source_id: str, task: int) -> str:
    """Group of the N*R downstream episodes of retrieved task k under one source task.

    Unique per (source_id, task) even if source ids contain "/": the task is the last segment.
    """
    if isinstance(task, bool) or not isinstance(task, int) or task < 0:
        raise ValueError(f"task must be an int >= 0, got {task!r}")
    return f"solver/{source_id}/{task}"


def baseline_group_id(source_id: str) -> str:
    """Group of the G solver episodes of one source task under `pipeline.method: grpo_baseline`.

    Its own prefix: never equal to a `solver_group_id`, whatever the source id.
    """
    return f"baseline/{source_id}"


def step_group_id(group_id: str, step: int) -> str:
    """A solver group split by step index (`pipeline.solver_grouping: step_index`)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    return f"{group_id}/step{step}"
