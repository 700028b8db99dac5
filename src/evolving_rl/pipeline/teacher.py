"""The teacher switch's part of a rollout (`pipeline.skill_use: teacher`, docs/design.md §4.6).

Owns `play_students` (for every retrieved task of a source task, R no-skill student episodes,
then each student's response scored with every candidate skill in its prompt as the skill-
conditioned solver reads it (`Extraction.solver_text`, `pipeline.unusable_skills`): one `score`
call of the policy per skill, no sampling; under `pipeline.teacher_skill: expert` instead one
card per retrieved task, `expert.expert_card` of that task, under index `EXPERT_CARD`; a task
without one scores its students with nothing), `attach_teacher` (a student's solver samples get the
mean teacher of `core.teaching`; `assembly` puts them in the solver group of their task),
`teach_evidence` (what each skill teaches: the extractor's reward under
`pipeline.extractor_reward: teach`) and `teacher_metrics`.
A student is scored only when it is trainable and generated something; a failed `score` call is
counted and leaves that card out of the student's teacher.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from evolving_rl.clients.policy import PolicyError, SamplingParams
from evolving_rl.core.samples import TrainSample
from evolving_rl.core.teaching import TeachEvidence, mean_log_ratio, mean_teacher
from evolving_rl.domains.base import ExpertDemonstrations
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import EpisodeResult, play, solver_prompt_ids
from evolving_rl.pipeline.expert import expert_card
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.pipeline.units import SourceUnit, Student

__all__ = ["EXPERT_CARD", "attach_teacher", "play_students", "teach_evidence", "teacher_metrics"]

logger = logging.getLogger(__name__)

EXPERT_CARD = -1  # the skill index of a retrieved task's expert card (teacher_skill: expert)


def _scorable(result: EpisodeResult) -> bool:
    return (result.trace is not None and result.first is not None
            and result.status.trainable and any(result.trace.loss_mask))


async def _score(ctx: PipelineContext, clock: IOClock, student: Student, card: str,
                 temperature: float) -> list[float] | None:
    """The student's response log-probs with `card` in its prompt, 0.0 off the loss mask."""
    result = student.result
    prompt = solver_prompt_ids(ctx, result.task, result.first, card)
    trace = result.trace
    try:
        with clock.wait("policy"):
            values = await ctx.policy.score(prompt + trace.response_ids, len(prompt),
                                            temperature)
    except PolicyError as error:
        logger.warning("teacher scoring of %s failed: %s", result.task.id, error)
        return None
    if len(values) != len(trace.response_ids):
        logger.warning("teacher scoring of %s returned %d log-probs for %d tokens",
                       result.task.id, len(values), len(trace.response_ids))
        return None
    return [value if flag else 0.0 for value, flag in zip(values, trace.loss_mask, strict=True)]


async def _teach(ctx: PipelineContext, clock: IOClock, student: Student,
                 cards: dict[int, str], temperature: float) -> None:
    if not _scorable(student.result):
        return
    indices = sorted(cards)
    scored = await asyncio.gather(*(_score(ctx, clock, student, cards[i], temperature)
                                    for i in indices))
    trace = student.result.trace
    for index, values in zip(indices, scored, strict=True):
        if values is None:
            student.score_failures += 1
        else:
            student.teacher[index] = values
            student.log_ratios[index] = mean_log_ratio(values, trace.log_probs, trace.loss_mask)


async def _expert_cards(ctx: PipelineContext, clock: IOClock,
                        unit: SourceUnit) -> list[dict[int, str]]:
    expert = cast(ExpertDemonstrations, ctx.adapter)
    found = await asyncio.gather(*(expert_card(ctx, clock, expert, task)
                                   for task in unit.retrieved))
    for task, (card, note) in zip(unit.retrieved, found, strict=True):
        if card is None or note is not None:
            logger.warning("expert card of %s: %s", task.id, note or "extraction failed")
    return [{EXPERT_CARD: card} if card is not None else {} for card, _ in found]


async def _cards_by_rank(ctx: PipelineContext, clock: IOClock,
                         unit: SourceUnit) -> list[dict[int, str]]:
    """Per retrieved task, the cards (by skill index) its students are scored with."""
    if ctx.cfg.pipeline.teacher_skill == "expert":
        return await _expert_cards(ctx, clock, unit)
    mode = ctx.cfg.pipeline.unusable_skills
    cards = {e.index: text for e in unit.extractions
             if (text := e.solver_text(mode)) is not None}
    return [cards] * len(unit.retrieved)


async def play_students(ctx: PipelineContext, clock: IOClock, unit: SourceUnit, repeats: int,
                        sampling: SamplingParams) -> list[Student]:
    """R no-skill episodes per retrieved task, each scored with every card it is taught with."""
    plan = [(rank, repeat) for rank in range(len(unit.retrieved)) for repeat in range(repeats)]
    results, cards = await asyncio.gather(
        asyncio.gather(*(play(ctx, clock, unit.retrieved[rank], None, sampling)
                         for rank, _ in plan)),
        _cards_by_rank(ctx, clock, unit))
    students = [Student(rank, repeat, result)
                for (rank, repeat), result in zip(plan, results, strict=True)]
    await asyncio.gather(*(_teach(ctx, clock, s, cards[s.rank], sampling.temperature)
                           for s in students if cards[s.rank]))
    return students


def attach_teacher(samples: list[TrainSample], student: Student) -> None:
    """Give the student's samples the mean of its cards' log-probs (none: no card scored)."""
    if not student.teacher:
        return
    teacher = mean_teacher([student.teacher[i] for i in sorted(student.teacher)])
    for sample in samples:
        sample.teacher_log_probs = list(teacher)


def teach_evidence(unit: SourceUnit, skill_index: int) -> TeachEvidence:
    """Returns and log-ratios of the students scored with this skill's card."""
    pairs = [(float(s.result.score), s.log_ratios[skill_index]) for s in unit.students
             if skill_index in s.log_ratios and s.result.score is not None]
    return TeachEvidence(tuple(r for r, _ in pairs), tuple(d for _, d in pairs))


def teacher_metrics(units: list[SourceUnit]) -> dict[str, float]:
    """Students played, won and scored; failed scorings; the mean log-ratio over (student, card)."""
    students = [s for u in units for s in u.students]
    ratios = [ratio for s in students for ratio in s.log_ratios.values()]
    return {"teacher/students": float(len(students)),
            "teacher/student_wins": float(sum(s.result.success for s in students)),
            "teacher/students_scored": float(sum(bool(s.teacher) for s in students)),
            "teacher/score_calls": float(sum(len(s.teacher) + s.score_failures
                                             for s in students)),
            "teacher/score_failures": float(sum(s.score_failures for s in students)),
            "teacher/mean_log_ratio": sum(ratios) / len(ratios) if ratios else 0.0}
