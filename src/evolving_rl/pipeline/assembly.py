"""From finished episodes and extractions to training samples with group advantages.

Owns `assemble`: solver rewards and extractor rewards by `core.rewards`, explicit GRPO group
ids by `core.grid` (extractor group = the N skills of one source task; solver group = for one
retrieved task, its N x R episodes across skills), advantages by `core.grpo` and role weights by
`core.roles`, every knob from the context's `core.rewards.RewardSettings`. Samples that are not
trainable or whose reward is undefined (infrastructure failures, no downstream evidence) leave
their group before normalisation and are not emitted; nothing with zero response tokens is ever
emitted. The optional source-episode samples
(`pipeline.train_on_source_episode`) form one group per rollout: a single source episode per task
has no group of its own to be compared with. With `pipeline.solver_grouping: step_index`, the
solver samples that carry a `step_index` (one sample per step: Mind2Web) form one group per
step index within those groups (`core.grid.step_group_id`). Under `pipeline.skill_use: teacher`
the no-skill students join the solver group of their task with their teacher log-probs
(`pipeline.teacher`), and with `pipeline.extractor_reward: teach` the extractor's reward is what
its skill teaches them (`core.teaching`). An extractor sample's response is
its one generation, so it carries that generation's top-p nucleus as is (None without
replay); solver samples carry their trace's response-aligned one (`EpisodeTrace.nucleus`). Also
builds the skill-library records. `episode_samples` and `finalize` (advantages over candidates)
also serve the plain GRPO baseline (`pipeline.baseline`).
"""

from __future__ import annotations

from dataclasses import dataclass

from evolving_rl.core.grid import (
    SOURCE_GROUP_ID,
    Grid,
    GroupKey,
    extractor_group_id,
    solver_group_id,
    step_group_id,
)
from evolving_rl.core.grpo import GroupAdvantages, group_advantages
from evolving_rl.core.rewards import (
    ExtractorOutcome,
    ExtractorReward,
    extractor_reward,
    solver_reward,
)
from evolving_rl.core.roles import Role, apply_role_weights
from evolving_rl.core.samples import TrainSample
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import EpisodeResult
from evolving_rl.pipeline.extraction import Extraction
from evolving_rl.pipeline.skill_library import MAX_RAW_CHARS, SkillRecord
from evolving_rl.pipeline.teacher import attach_teacher, teach_evidence
from evolving_rl.pipeline.units import SourceUnit


@dataclass
class Assembled:
    """Emitted samples, every candidate before filtering, and the group statistics (by
    `GroupKey`: each group's id and role)."""

    samples: list[TrainSample]
    candidates: list[TrainSample]
    advantages: GroupAdvantages
    extractor_rewards: list[tuple[SourceUnit, Extraction, ExtractorReward]]
    records: list[SkillRecord]

    @classmethod
    def empty(cls) -> Assembled:
        return cls([], [], group_advantages([], []), [], [])


def episode_samples(ctx: PipelineContext, result: EpisodeResult, group_id: str,
                     metadata: dict) -> list[TrainSample]:
    if result.trace is None:
        return []
    steps = result.n_steps
    reward = solver_reward(None if result.score is None else result.success,
                           result.n_invalid_actions / steps if steps else 0.0,
                           ctx.rewards.invalid_action_penalty)
    if not result.status.trainable:
        reward = None
    metadata = {**metadata, "task_id": result.task.id, "task_type": result.task.task_type,
                "stop_reason": result.stop_reason, "n_steps": result.n_steps,
                "n_invalid_actions": result.n_invalid_actions, "success": result.success}
    samples = ctx.adapter.pack(result.trace, result.status, reward, Role.SOLVER, group_id,
                               metadata)
    if ctx.cfg.pipeline.solver_grouping == "step_index":
        for sample in samples:
            if "step_index" in sample.metadata:
                sample.group_id = step_group_id(group_id, sample.metadata["step_index"])
    return samples


def _extractor_sample(unit: SourceUnit, extraction: Extraction, reward: ExtractorReward,
                      base: dict) -> list[TrainSample]:
    generation = extraction.generation
    if generation is None or not generation.token_ids:
        return []
    value = reward.value if extraction.status.trainable else None
    metadata = {**base, "task_id": unit.task.id, "task_type": unit.task.task_type,
                "skill_index": extraction.index, "reward_status": str(reward.status),
                "skill_parsed": bool(extraction.parse and extraction.parse.ok),
                "audit_passed": bool(extraction.audit and extraction.audit.ok),
                "parse_reason": extraction.parse.reason if extraction.parse else "no_output"}
    return [TrainSample(role=Role.EXTRACTOR, prompt_ids=list(extraction.prompt_ids),
                        response_ids=list(generation.token_ids),
                        loss_mask=[1] * len(generation.token_ids),
                        log_probs=list(generation.log_probs), reward=value,
                        group_id=extractor_group_id(unit.key), status=extraction.status,
                        metadata=metadata, nucleus=generation.nucleus,
                        prefix_cache=generation.prefix_cache)]


def _record(unit: SourceUnit, extraction: Extraction, reward: ExtractorReward, grid: Grid,
            tag: str) -> SkillRecord:
    evidence = [unit.downstream[i] for i in grid.skill_episodes(extraction.index)
                if i in unit.downstream]
    parse, audit = extraction.parse, extraction.audit
    skill = parse.skill.to_dict() if parse and parse.skill else None
    return SkillRecord(
        rollout=tag, source_id=unit.task.id, source_question=unit.task.question,
        source_task_type=unit.task.task_type, source_success=unit.source.success,
        skill_index=extraction.index, skill_format=extraction.skill_format.value,
        status=extraction.status.value,
        parse_ok=bool(parse and parse.ok), parse_reason=parse.reason if parse else "no_output",
        audit_ok=bool(audit and audit.ok), audit_rule=str(audit.rule) if audit and audit.rule
        else None, audit_detail=audit.detail if audit else "", skill=skill,
        raw_text=extraction.text[:MAX_RAW_CHARS], downstream_ids=[r.task.id for r in evidence],
        downstream_scores=[r.score for r in evidence], reward=reward.value,
        reward_status=str(reward.status))


def _unit_samples(ctx: PipelineContext, unit: SourceUnit, grid: Grid, tag: str,
                  out: Assembled) -> None:
    base = {"rollout": tag, "source_id": unit.task.id}
    for index, result in sorted(unit.downstream.items()):
        cell = grid.coords(index)
        out.candidates += episode_samples(
            ctx, result, solver_group_id(unit.key, cell.task),
            {**base, "skill_index": cell.skill, "retrieved_rank": cell.task,
             "repeat": cell.repeat})
    for student in unit.students:
        samples = episode_samples(
            ctx, student.result, solver_group_id(unit.key, student.rank),
            {**base, "student": True, "retrieved_rank": student.rank, "repeat": student.repeat,
             "teacher_skills": sorted(student.teacher)})
        attach_teacher(samples, student)
        out.candidates += samples
    teach = ctx.cfg.pipeline.extractor_reward == "teach"
    for extraction in unit.extractions:
        scores = tuple(unit.downstream[i].score for i in grid.skill_episodes(extraction.index)
                       if i in unit.downstream)
        outcome = ExtractorOutcome(
            parsed=bool(extraction.parse and extraction.parse.ok),
            audit_passed=bool(extraction.audit and extraction.audit.ok),
            downstream_scores=scores, generation_failed=extraction.generation_failed)
        reward = extractor_reward(outcome, ctx.rewards,
                                  teach_evidence(unit, extraction.index) if teach else None)
        out.extractor_rewards.append((unit, extraction, reward))
        out.candidates += _extractor_sample(unit, extraction, reward, base)
        out.records.append(_record(unit, extraction, reward, grid, tag))
    if ctx.cfg.pipeline.train_on_source_episode:
        out.candidates += episode_samples(ctx, unit.source, SOURCE_GROUP_ID,
                                           {**base, "source_episode": True})


def assemble(ctx: PipelineContext, units: list[SourceUnit], grid: Grid, tag: str) -> Assembled:
    """Samples with advantages for one rollout (rules in the module docstring)."""
    out = Assembled.empty()
    for unit in units:
        _unit_samples(ctx, unit, grid, tag, out)
    return finalize(ctx, out)


def finalize(ctx: PipelineContext, out: Assembled) -> Assembled:
    """Group advantages and role weights over `out.candidates`; keeps the samples that train."""
    candidates = [s for s in out.candidates if s.response_length > 0]
    rewards = [s.reward if s.status.trainable else None for s in candidates]
    settings = ctx.rewards
    out.advantages = group_advantages(
        [GroupKey(s.role, s.group_id) for s in candidates], rewards,
        eps=settings.advantage_eps, drop_zero_variance=settings.drop_zero_variance_groups)
    weighted = apply_role_weights(out.advantages.advantages, [s.role for s in candidates],
                                  settings.role_weights)
    for sample, advantage, keep in zip(candidates, weighted, out.advantages.keep, strict=True):
        if keep and advantage is not None:
            sample.advantage = advantage
            out.samples.append(sample)
    out.candidates = candidates
    return out
