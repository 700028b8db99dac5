"""An expert's trajectory of a task, replayed through the real environment (protocol
`expert_skill`, `pipeline.evaluation`).

Owns `ExpertReplay` and `replay_expert`: the adapter's expert commands are played, under the
episode semaphore, exactly as an episode is (the adapter's `reset` and `step` over the env
client; the env episode is always closed), one `Turn` per command: the observation and the
admissible actions it was sent at, the model text a solver would have written to send it
(`ExpertDemonstrations.expert_reply`), the command and status `parse_action` reads from that
text, and the reward and info of the observation it led to. The replay stops when the
environment says done; it succeeded when that last observation is won (score 1). An env
failure ends it without a trajectory (logged).
Also owns `expert_card`: the card extracted (`extraction.greedy_card`) from a task's replayed
expert trajectory, with the success flag the replay ended with, and why there is none
(`NOTE_NO_EXPERT`: no commands; `NOTE_EXPERT_FAILED`: the replay failed in the environment) or
why it is weaker (`NOTE_EXPERT_NOT_WON`: extracted as failed). The `expert_skill` evaluation
protocol and the teacher switch's expert cards (`pipeline.teacher_skill: expert`) both use it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from evolving_rl.domains.base import ExpertDemonstrations, Observation, TaskSpec, Turn
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.episode import ENV_ERRORS, close_episode, reset_env
from evolving_rl.pipeline.extraction import greedy_card
from evolving_rl.pipeline.timing import IOClock

logger = logging.getLogger(__name__)

# Why an expert card is missing or extracted as failed (`CaseRecord.skill_note` values)
NOTE_NO_EXPERT = "no_expert_trajectory"
NOTE_EXPERT_FAILED = "expert_replay_failed"
NOTE_EXPERT_NOT_WON = "expert_not_won"


@dataclass(frozen=True)
class ExpertReplay:
    """The turns of a replayed expert trajectory and whether the environment said it won."""

    turns: list[Turn]
    success: bool


async def _replay(ctx: PipelineContext, clock: IOClock, expert: ExpertDemonstrations,
                  episode_id: str, observation: Observation,
                  commands: list[str]) -> ExpertReplay:
    turns: list[Turn] = []
    for command in commands:
        text = expert.expert_reply(command, observation)
        choice = ctx.adapter.parse_action(text, observation)
        with clock.wait("env"):
            after = await ctx.adapter.step(ctx.env, episode_id, choice.command)
        turns.append(Turn(observation.text, text, choice.command, choice.status,
                          observation.actions, after.reward, after.info))
        observation = after
        if observation.done:
            break
    return ExpertReplay(turns, observation.done and observation.score >= 1.0)


async def replay_expert(ctx: PipelineContext, clock: IOClock, expert: ExpertDemonstrations,
                        task: TaskSpec, commands: list[str]) -> ExpertReplay | None:
    """Play `commands` in `task` (rules in the module docstring); None on an env failure."""
    async with ctx.limits.episodes:
        try:
            episode_id, first = await reset_env(ctx, clock, task)
        except ENV_ERRORS as error:
            logger.warning("expert replay of %s: reset failed: %s", task.id, error)
            return None
        try:
            return await _replay(ctx, clock, expert, episode_id, first, commands)
        except ENV_ERRORS as error:
            logger.warning("expert replay of %s failed: %s", task.id, error)
            return None
        finally:
            await asyncio.shield(close_episode(ctx, clock, episode_id))


async def expert_card(ctx: PipelineContext, clock: IOClock, expert: ExpertDemonstrations,
                      task: TaskSpec) -> tuple[str | None, str | None]:
    """(the card extracted from `task`'s expert replay or None, its note; module docstring)."""
    commands = expert.expert_commands(task)
    if not commands:
        return None, NOTE_NO_EXPERT
    replay = await replay_expert(ctx, clock, expert, task, commands)
    if replay is None:
        return None, NOTE_EXPERT_FAILED
    card = await greedy_card(ctx, clock, task, replay.turns, replay.success)
    return card, None if replay.success else NOTE_EXPERT_NOT_WON
