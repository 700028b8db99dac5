"""The one episode loop, for every environment: reset, then turn by turn generate and step.

Owns `EpisodeResult`, `run_episode` and `play` (an episode under the context's episode semaphore:
how the rollout, the baseline and the evaluation start one). The prompt is the adapter's
chat-templated solver messages; each later turn appends the observation block (tokenised once, mask
0, log-prob 0.0) and then the sampled ids with their log-probs (mask 1), never re-tokenised; under
top-p replay each reply also brings its nucleus, and observation blocks get empty spans. A
configured solver reply prefix opens each assistant turn on the prompt side (mask 0) and is
prepended to the decoded reply before parsing. A turn's `max_new_tokens` is its role's
(`sampling.solver` or `sampling.eval_solver`), capped by the room left in the context. An adapter
with `step_prompts` (Mind2Web) has no dialogue history: each step is prompted afresh by its
`solver_messages` with the current observation and recorded in `EpisodeTrace.steps` (one prompt and
one reply each); a step prompt that does not fit the context truncates the episode. Each turn
records the reward and info of the observation its action led to. Every way an episode can end is
a status, never an exception:

  COMPLETED         the environment said done (score from the environment)
  TRUNCATED         max_steps reached, or the context filled up (`stop_reason` says which; the
                    episode is scored as not solved and stays trainable)
  CONTEXT_OVERFLOW  the prompt alone leaves no room for a reply (nothing generated)
  POLICY_ERROR      the policy server failed; ENV_ERROR: the env server failed or answered
                    something unreadable; ABORTED / EMPTY: the server aborted or returned nothing
The env reset waits its turn under the context's reset bound (`reset_env`,
`pipeline.max_concurrent_resets`). Infrastructure failures score None (the sample leaves its
GRPO group). Replies without a valid action are sent as-is and counted in `action_statuses`.
The env episode is always closed (`close_episode`). The result keeps the reset's observation
(`first`): the teacher switch rebuilds the prompt with a card from it (`pipeline.teacher`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from evolving_rl.clients.http import ServerError, TransportError
from evolving_rl.clients.policy import FinishReason, PolicyError, SamplingParams
from evolving_rl.core.samples import SampleStatus
from evolving_rl.domains.base import EnvProtocolError, EpisodeTrace, Observation, TaskSpec, Turn
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.timing import IOClock

logger = logging.getLogger(__name__)

ENV_ERRORS = (TransportError, ServerError, EnvProtocolError)


@dataclass
class EpisodeResult:
    """How one episode ended, with its token record (None when the reset failed)."""

    task: TaskSpec
    trace: EpisodeTrace | None
    status: SampleStatus
    stop_reason: str
    score: float | None  # None: failed for an infrastructure reason
    action_statuses: Counter[str] = field(default_factory=Counter)
    error: str | None = None
    started_s: float = 0.0
    duration_s: float = 0.0
    first: Observation | None = None  # the reset's observation (the teacher rebuilds the prompt)

    @property
    def success(self) -> bool:
        return bool(self.score) and self.score >= 1.0

    @property
    def n_steps(self) -> int:
        return len(self.trace.turns) if self.trace else 0

    @property
    def n_invalid_actions(self) -> int:
        return sum(n for status, n in self.action_statuses.items() if status != "ok")


@dataclass
class _Episode:
    """Mutable state of one running episode."""

    ctx: PipelineContext
    clock: IOClock
    task: TaskSpec
    episode_id: str
    trace: EpisodeTrace
    skill_card: str | None = None
    actions: Counter[str] = field(default_factory=Counter)

    def end(self, status: SampleStatus, reason: str, score: float | None,
            error: str | None = None) -> EpisodeResult:
        if error:
            logger.warning("episode of %s ended with %s: %s", self.task.id, status.value, error)
        return EpisodeResult(self.task, self.trace, status, reason, score, self.actions, error)


def _reply_prefix(ctx: PipelineContext) -> list[int]:
    """Ids of the configured solver reply prefix (part of the prompt or observation block)."""
    prefix = ctx.cfg.pipeline.solver_reply_prefix
    return ctx.tokenizer.encode_text(prefix) if prefix else []


def solver_prompt_ids(ctx: PipelineContext, task: TaskSpec, observation: Observation,
                      skill_card: str | None) -> list[int]:
    """The solver's chat-templated prompt for `observation` (with `skill_card` where the adapter
    places it), then the reply prefix: an episode's first prompt, a step prompt, a teacher's."""
    return ctx.tokenizer.encode_prompt(ctx.adapter.solver_messages(
        task, observation, skill_card)) + _reply_prefix(ctx)


def _history_input(ep: _Episode, observation: Observation, step: int,
                   last_id: int | None) -> EpisodeTrace | EpisodeResult:
    """The dialogue with this step's observation block appended (none before the first reply)."""
    ctx, trace = ep.ctx, ep.trace
    if step > 0:
        block = ctx.tokenizer.encode_followup(
            ctx.adapter.render_observation(step, observation), last_id) + _reply_prefix(ctx)
        if trace.length + len(block) >= ctx.cfg.pipeline.max_context_tokens:
            return ep.end(SampleStatus.TRUNCATED, "context_limit", 0.0)
        trace.add_observation(block)
    return trace


def _step_input(ep: _Episode, observation: Observation, step: int) -> EpisodeTrace | EpisodeResult:
    """A fresh record for this step: its own prompt (the episode's first prompt at step 0)."""
    ctx = ep.ctx
    if step == 0:
        prompt = list(ep.trace.prompt_ids)
    else:
        prompt = solver_prompt_ids(ctx, ep.task, observation, ep.skill_card)
        if len(prompt) >= ctx.cfg.pipeline.max_context_tokens:
            return ep.end(SampleStatus.TRUNCATED, "context_limit", 0.0)
    ep.trace.steps.append(EpisodeTrace(prompt))
    return ep.trace.steps[-1]


async def _turn(ep: _Episode, observation: Observation, sampling: SamplingParams,
                step: int, last_id: int | None) -> EpisodeResult | tuple[Observation, int]:
    """One observation block (or step prompt) + reply + env step; an `EpisodeResult` when the
    episode ends."""
    ctx = ep.ctx
    max_context = ctx.cfg.pipeline.max_context_tokens
    trace = (_step_input(ep, observation, step) if ctx.adapter.step_prompts
             else _history_input(ep, observation, step, last_id))
    if isinstance(trace, EpisodeResult):
        return trace
    room = max_context - trace.length
    try:
        with ep.clock.wait("policy"):
            generation = await ctx.policy.generate(
                trace.prompt_ids + trace.response_ids,
                sampling.capped(room))
    except PolicyError as error:
        return ep.end(SampleStatus.POLICY_ERROR, "policy_error", None, str(error))
    if generation.finish_reason is FinishReason.ABORT:
        return ep.end(SampleStatus.ABORTED, "aborted", None)
    if not generation.token_ids:
        return ep.end(SampleStatus.EMPTY, "empty_generation", None)
    trace.add_generation(generation.token_ids, generation.log_probs, generation.nucleus,
                         generation.prefix_cache)
    text = ctx.cfg.pipeline.solver_reply_prefix + ctx.tokenizer.decode(generation.token_ids)
    choice = ctx.adapter.parse_action(text, observation)
    ep.actions[choice.status] += 1
    turn = Turn(observation.text, text, choice.command, choice.status, observation.actions)
    ep.trace.turns.append(turn)
    if generation.finish_reason is FinishReason.LENGTH and trace.length >= max_context:
        return ep.end(SampleStatus.TRUNCATED, "context_limit", 0.0)
    try:
        with ep.clock.wait("env"):
            observation = await ctx.adapter.step(ctx.env, ep.episode_id, choice.command)
    except ENV_ERRORS as error:
        return ep.end(SampleStatus.ENV_ERROR, "env_error", None, str(error))
    ep.trace.turns[-1] = replace(turn, reward=observation.reward, info=observation.info)
    if observation.done:
        return ep.end(SampleStatus.COMPLETED, "done", observation.score)
    return observation, generation.token_ids[-1]


async def _play(ep: _Episode, first: Observation, sampling: SamplingParams) -> EpisodeResult:
    ctx = ep.ctx
    if ep.trace.length >= ctx.cfg.pipeline.max_context_tokens:
        return ep.end(SampleStatus.CONTEXT_OVERFLOW, "prompt_too_long", None,
                      f"prompt of {ep.trace.length} tokens")
    observation, last_id = first, None
    for step in range(ctx.cfg.pipeline.max_steps):
        outcome = await _turn(ep, observation, sampling, step, last_id)
        if isinstance(outcome, EpisodeResult):
            return outcome
        observation, last_id = outcome
    return ep.end(SampleStatus.TRUNCATED, "max_steps", 0.0)


async def close_episode(ctx: PipelineContext, clock: IOClock, episode_id: str) -> None:
    """Close an env episode; a failure is logged, never raised."""
    try:
        with clock.wait("env"):
            await ctx.env.close_episode(episode_id)
    except ENV_ERRORS as error:
        logger.warning("closing env episode %s failed: %s", episode_id, error)


async def reset_env(ctx: PipelineContext, clock: IOClock,
                    task: TaskSpec) -> tuple[str, Observation]:
    """Start `task` in the environment, under the context's reset bound; errors propagate."""
    async with ctx.limits.resets:
        with clock.wait("env"):
            return await ctx.adapter.reset(ctx.env, task)


async def run_episode(ctx: PipelineContext, clock: IOClock, task: TaskSpec,
                      skill_card: str | None, sampling: SamplingParams) -> EpisodeResult:
    """Play `task` once (with `skill_card` in its prompt, where the adapter places it)."""
    started = time.perf_counter()
    try:
        episode_id, first = await reset_env(ctx, clock, task)
    except ENV_ERRORS as error:
        logger.warning("reset of %s failed: %s", task.id, error)
        result = EpisodeResult(task, None, SampleStatus.ENV_ERROR, "reset_failed", None,
                               error=str(error))
    else:
        ep = _Episode(ctx, clock, task, episode_id,
                      EpisodeTrace(solver_prompt_ids(ctx, task, first, skill_card)), skill_card)
        try:
            result = await _play(ep, first, sampling)
        finally:
            await asyncio.shield(close_episode(ctx, clock, episode_id))
        result.first = first
    result.started_s, result.duration_s = started, time.perf_counter() - started
    return result


async def play(ctx: PipelineContext, clock: IOClock, task: TaskSpec, skill_card: str | None,
               sampling: SamplingParams) -> EpisodeResult:
    """One episode under the episode semaphore."""
    async with ctx.limits.episodes:
        return await run_episode(ctx, clock, task, skill_card, sampling)
