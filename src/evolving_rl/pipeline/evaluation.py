"""Evaluation protocols (docs/design.md §8), greedy, per test task and repeat.

`EvalProtocol`:
  reference       (the reference's eval) retrieve the top-1 task of the retrieval split (never
                  the test task itself), play it without a skill, extract one skill from that
                  episode, then play the test task with that skill (an unusable one as
                  `pipeline.unusable_skills` says) and without any skill;
  no_skill        the test task without a skill only (a baseline model's number);
  library         as `reference`, but the skill is the best usable one a persisted library
                  (built during training) holds for the retrieved task, validated again in the
                  format its record names and rendered to its card;
  least_similar   as `reference` with the least similar task retrieved (an ablation);
  self_inclusion  as `reference`, retrieving from the evaluated split itself with the test
                  task allowed: its top-1 is usually the test task, so the skill comes from an
                  attempt at the very task (the reference's training-time retrieval did not
                  exclude the source task; an upper bound, never a headline number);
  expert_skill    as `reference`, but the skill is extracted from an expert trajectory of the
                  retrieved task (its adapter's `ExpertDemonstrations`, replayed through the
                  real environment by `pipeline.expert`) with the success flag the replay ended
                  with: no expert commands, or a failed replay, is no skill (`NOTE_NO_EXPERT`,
                  `NOTE_EXPERT_FAILED`); a replay that did not win is extracted as failed
                  (`NOTE_EXPERT_NOT_WON`);
  written_skill   no retrieval: the skill is the hand-written card of the test task's own type
                  (its adapter's `WrittenSkills`: ALFWorld's by task type, the probe's by family;
                  none for the type: `NOTE_NO_WRITTEN_SKILL`),
                  the ceiling of the skill pipeline (can the solver use a correct skill at all).
A protocol whose capability the adapter lacks fails at startup (`check_supported`). A skill
that could not be obtained for an infrastructure reason — the retrieved task's source episode
(`NOTE_SOURCE_FAILED`) or expert replay (`NOTE_EXPERT_FAILED`) failed in the environment or
the policy — leaves the case's with-skill arm unscored (`INFRA_ARM`, an infra failure) instead
of standing in as a no-skill episode.
Test tasks are played by the adapter's `for_evaluation()` (Mind2Web: teacher forced, for its
standard metrics); the retrieved task's source episode is played as in training. Each finished
case becomes a `CaseRecord` (kept in a `CaseStore` when one is given: cases already there are
not run again) and the numbers come from the records alone (`pipeline.eval_report`).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

from evolving_rl.core.skill import render_skill_card, validate_skill
from evolving_rl.core.strenum import StrEnum
from evolving_rl.domains.base import (
    EnvironmentAdapter,
    ExpertDemonstrations,
    TaskSpec,
    WrittenSkills,
)
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import EpisodeResult, play
from evolving_rl.pipeline.eval_records import ArmRecord, CaseRecord, CaseStore
from evolving_rl.pipeline.eval_report import summarize
from evolving_rl.pipeline.expert import (
    NOTE_EXPERT_FAILED,
    expert_card,
)
from evolving_rl.pipeline.extraction import greedy_card
from evolving_rl.pipeline.progress import live_bar
from evolving_rl.pipeline.similar_tasks import retrieve
from evolving_rl.pipeline.skill_library import SkillLibrary, SkillRecord
from evolving_rl.pipeline.timing import IOClock


class EvalProtocol(StrEnum):
    """How the skill of a test task is obtained (module docstring)."""

    REFERENCE = "reference"
    NO_SKILL = "no_skill"
    LIBRARY = "library"
    LEAST_SIMILAR = "least_similar"
    SELF_INCLUSION = "self_inclusion"
    EXPERT_SKILL = "expert_skill"
    WRITTEN_SKILL = "written_skill"


# `CaseRecord.skill_note` values (module docstring), counted by the report
NOTE_NO_WRITTEN_SKILL = "no_written_skill"
NOTE_SOURCE_FAILED = "source_episode_failed"
INFRA_NOTES = frozenset({NOTE_EXPERT_FAILED, NOTE_SOURCE_FAILED})
INFRA_ARM = ArmRecord("env_error", None, False, 0, {})  # unscored: leaves the rates
# The protocols that retrieve no task
_NO_RETRIEVAL = frozenset({EvalProtocol.NO_SKILL, EvalProtocol.WRITTEN_SKILL})
_NEEDS = {EvalProtocol.EXPERT_SKILL: (ExpertDemonstrations, "expert trajectories"),
          EvalProtocol.WRITTEN_SKILL: (WrittenSkills, "hand-written skills")}


class UnsupportedProtocolError(ValueError):
    """The environment's adapter lacks what the protocol needs."""


def check_supported(adapter: EnvironmentAdapter, protocol: EvalProtocol) -> None:
    """Raise `UnsupportedProtocolError` when `adapter` lacks the capability `protocol` needs."""
    capability, what = _NEEDS.get(protocol, (None, ""))
    if capability is not None and not isinstance(adapter, capability):
        raise UnsupportedProtocolError(
            f"the {protocol} protocol needs {what}, which the {adapter.name} environment "
            f"does not provide ({capability.__name__} in domains/base.py)")


@dataclasses.dataclass(frozen=True)
class EvalPlan:
    """What to evaluate: the protocol, the split's name, where retrieval looks (None: the
    config's `pipeline.retrieval_split`), the training task types (for the training / held-out
    breakdown), the persisted library (protocol `library`) and the store of finished cases."""

    protocol: EvalProtocol = EvalProtocol.REFERENCE
    split: str = ""
    retrieval_split: str | None = None
    train_types: Collection[str] | None = None
    library: SkillLibrary | None = None
    store: CaseStore | None = None
    progress: bool = False


def protocol_context(ctx: PipelineContext, plan: EvalPlan) -> PipelineContext:
    """`ctx` with the retrieval settings of the plan's protocol (shares every collaborator)."""
    pipeline = ctx.cfg.pipeline
    split = plan.retrieval_split or pipeline.retrieval_split
    changes: dict[str, Any] = {"retrieval_split": split, "include_source_in_retrieval": False,
                               "retrieval_order": "most_similar"}
    if plan.protocol is EvalProtocol.LEAST_SIMILAR:
        changes["retrieval_order"] = "least_similar"
    elif plan.protocol is EvalProtocol.SELF_INCLUSION:
        changes.update(retrieval_split=plan.split, include_source_in_retrieval=True)
    out = copy.copy(ctx)
    out.cfg = dataclasses.replace(ctx.cfg, pipeline=dataclasses.replace(pipeline, **changes))
    return out


@dataclasses.dataclass(frozen=True)
class _Sources:
    """Where a protocol's skills come from besides the model (built once, at startup)."""

    library: dict[str, SkillRecord] | None = None
    expert: ExpertDemonstrations | None = None
    written: Mapping[str, str] | None = None
    written_key: Callable[[TaskSpec], str] | None = None


def _sources(adapter: EnvironmentAdapter, plan: EvalPlan) -> _Sources:
    """The plan's skill sources; raises when the adapter lacks them (a bad written-skill file
    raises too), before any case runs."""
    check_supported(adapter, plan.protocol)
    if plan.protocol is EvalProtocol.LIBRARY:
        if plan.library is None:
            raise ValueError("the library protocol needs a skill library")
        return _Sources(library=plan.library.best_by_source())
    if plan.protocol is EvalProtocol.EXPERT_SKILL:
        return _Sources(expert=cast(ExpertDemonstrations, adapter))
    if plan.protocol is EvalProtocol.WRITTEN_SKILL:
        written = cast(WrittenSkills, adapter)
        return _Sources(written=written.written_skill_cards(),
                        written_key=written.written_skill_key)
    return _Sources()


# (the card the solver reads, None: no skill; the case's skill note)
_SkillOutcome = tuple[str | None, str | None]


def _library_card(record: SkillRecord | None) -> str | None:
    if record is None or record.skill is None:
        return None
    parsed = validate_skill(record.skill, record.skill_format)
    return render_skill_card(parsed.skill) if parsed.skill is not None else None


async def _attempt_card(ctx: PipelineContext, clock: IOClock,
                        retrieved: TaskSpec) -> _SkillOutcome:
    source = await play(ctx, clock, retrieved, None,
                        ctx.sampling(ctx.cfg.sampling.eval_solver, solver=True))
    if source.trace is None or source.score is None:
        return None, NOTE_SOURCE_FAILED
    return await greedy_card(ctx, clock, retrieved, source.trace.turns, source.success), None


async def _skill_for(ctx: PipelineContext, clock: IOClock, task: TaskSpec,
                     retrieved: TaskSpec | None, sources: _Sources) -> _SkillOutcome:
    if sources.written is not None and sources.written_key is not None:
        card = sources.written.get(sources.written_key(task))
        return card, None if card is not None else NOTE_NO_WRITTEN_SKILL
    if retrieved is None:
        return None, None
    if sources.library is not None:
        return _library_card(sources.library.get(retrieved.id)), None
    if sources.expert is not None:
        return await expert_card(ctx, clock, sources.expert, retrieved)
    return await _attempt_card(ctx, clock, retrieved)


def _arm(test: PipelineContext, result: EpisodeResult) -> ArmRecord:
    measures = (test.adapter.episode_measures(result.trace.turns)
                if result.trace is not None and result.score is not None else {})
    return ArmRecord(str(result.status), result.score, result.success, result.n_steps, measures)


async def _run_case(source: PipelineContext, test: PipelineContext, clock: IOClock,
                    plan: EvalPlan, task: TaskSpec, repeat: int, retrieved: TaskSpec | None,
                    sources: _Sources) -> CaseRecord:
    solver = test.sampling(test.cfg.sampling.eval_solver, solver=True)
    without = asyncio.ensure_future(play(test, clock, task, None, solver))
    card, note = None, None
    if plan.protocol is not EvalProtocol.NO_SKILL:
        card, note = await _skill_for(source, clock, task, retrieved, sources)
    with_skill = None
    if card is not None:
        with_skill = _arm(test, await play(test, clock, task, card, solver))
    elif note in INFRA_NOTES:
        with_skill = INFRA_ARM
    return CaseRecord(
        protocol=str(plan.protocol), split=plan.split, task_id=task.id, task_type=task.task_type,
        repeat=repeat, retrieved_id=retrieved.id if retrieved is not None else None,
        skill_obtained=card is not None, without_skill=_arm(test, await without),
        with_skill=with_skill, skill_note=note)


async def _retrieved(source: PipelineContext, clock: IOClock, plan: EvalPlan,
                     tasks: list[TaskSpec]) -> tuple[list[TaskSpec | None], bool]:
    if plan.protocol in _NO_RETRIEVAL or not tasks:
        return [None] * len(tasks), False
    found = await retrieve(source, clock, tasks, 1)
    return [next(iter(hits), None) for hits in found.tasks], found.error is not None


async def evaluate_cases(ctx: PipelineContext, rows: Sequence[Mapping[str, Any]],
                         repeats: int, plan: EvalPlan) -> tuple[list[CaseRecord], bool]:
    """Every (test task, repeat) case of the plan, run or read back from its store; returns the
    records (finished ones included) and whether retrieval failed."""
    sources = _sources(ctx.adapter, plan)
    source = protocol_context(ctx, plan)
    test = copy.copy(source)
    test.adapter = ctx.adapter.for_evaluation()
    clock = IOClock()
    tasks = [ctx.adapter.task_from_row(row) for row in rows]
    done = plan.store.load() if plan.store is not None else {}
    todo = [(i, r) for r in range(repeats) for i, task in enumerate(tasks)
            if (str(plan.protocol), plan.split, task.id, r) not in done]
    needed = sorted({i for i, _ in todo})
    retrieved, failed = await _retrieved(source, clock, plan, [tasks[i] for i in needed])
    by_task = dict(zip(needed, retrieved, strict=True))
    async with live_bar(clock, total=len(tasks) * repeats, done=len(tasks) * repeats - len(todo),
                        desc=f"eval {plan.protocol} {plan.split}".strip(), unit="case",
                        enabled=plan.progress) as bar:
        async def one(i: int, repeat: int) -> CaseRecord:
            record = await _run_case(source, test, clock, plan, tasks[i], repeat, by_task[i],
                                     sources)
            if plan.store is not None:
                plan.store.append([record])
            bar.update(1)
            return record
        fresh = await asyncio.gather(*(one(i, r) for i, r in todo))
    keys = {(str(plan.protocol), plan.split, task.id, r) for r in range(repeats) for task in tasks}
    records = [record for key, record in done.items() if key in keys] + list(fresh)
    return records, failed


async def run_eval(ctx: PipelineContext, rows: Sequence[Mapping[str, Any]], *,
                   repeats: int = 1, library: SkillLibrary | None = None,
                   plan: EvalPlan | None = None) -> dict[str, float]:
    """Run a protocol on the test `rows`, `repeats` times; returns flat metrics
    (`pipeline.eval_report`). Without a plan: `reference`, or `library` when one is given."""
    if plan is None:
        protocol = EvalProtocol.LIBRARY if library is not None else EvalProtocol.REFERENCE
        plan = EvalPlan(protocol=protocol, library=library, progress=True)
    records, failed = await evaluate_cases(ctx, rows, repeats, plan)
    out = summarize(records, ctx.adapter.eval_metrics, plan.train_types)
    out["eval/retrieval_failed"] = float(failed)
    return out
