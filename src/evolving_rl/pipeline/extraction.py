"""Stage 2: N skill extractions from one source episode, parsed and audited by the core.

Owns `Extraction` and `extract_skills`. The extractor prompt (adapter-rendered: task,
trajectory, the true success flag, the core's skill schema) is tokenised once and sampled N
times concurrently under the extraction semaphore; each output is parsed by `core.skill` and
audited by `core.audit`. A failed generation becomes a status, never an exception.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from evolving_rl.clients.policy import FinishReason, Generation, PolicyError, SamplingParams
from evolving_rl.core.audit import AuditResult, audit_skill
from evolving_rl.core.skill import (
    SkillParseResult,
    parse_skill,
    render_skill_card,
    skill_schema_text,
)
from evolving_rl.domains.base import TaskSpec, Turn
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.pipeline.types import SampleStatus

logger = logging.getLogger(__name__)

_AUDIT_OFF = AuditResult(True, None, "audit disabled")


@dataclass
class Extraction:
    """One extractor generation and the skill read from it."""

    index: int
    prompt_ids: list[int]
    status: SampleStatus
    generation: Generation | None = None
    text: str = ""
    parse: SkillParseResult | None = None
    audit: AuditResult | None = None
    error: str | None = None

    @property
    def generation_failed(self) -> bool:
        return not self.status.trainable

    @property
    def usable(self) -> bool:
        """Parsed and audited: the solver may play with it."""
        return (not self.generation_failed and self.parse is not None and self.parse.ok
                and self.audit is not None and self.audit.ok)

    @property
    def card(self) -> str:
        assert self.parse is not None and self.parse.skill is not None
        return render_skill_card(self.parse.skill)


async def _extract_one(ctx: PipelineContext, clock: IOClock, index: int, prompt_ids: list[int],
                       sampling: SamplingParams) -> Extraction:
    room = ctx.cfg.pipeline.max_context_tokens - len(prompt_ids)
    if room <= 0:
        return Extraction(index, prompt_ids, SampleStatus.CONTEXT_OVERFLOW,
                          error=f"extractor prompt of {len(prompt_ids)} tokens")
    try:
        async with ctx.limits.extractions:
            with clock.wait("policy"):
                generation = await ctx.policy.generate(prompt_ids, sampling.capped(room))
    except PolicyError as error:
        logger.warning("extraction %d failed: %s", index, error)
        return Extraction(index, prompt_ids, SampleStatus.POLICY_ERROR, error=str(error))
    if generation.finish_reason is FinishReason.ABORT:
        return Extraction(index, prompt_ids, SampleStatus.ABORTED, generation)
    if not generation.token_ids:
        return Extraction(index, prompt_ids, SampleStatus.EMPTY, generation)
    status = (SampleStatus.TRUNCATED if generation.finish_reason is FinishReason.LENGTH
              else SampleStatus.COMPLETED)
    text = ctx.cfg.pipeline.extractor_reply_prefix + ctx.tokenizer.decode(generation.token_ids)
    parse = parse_skill(text)
    audit = None
    if parse.ok and parse.skill is not None:
        audit = audit_skill(parse.skill, ctx.audit) if ctx.audit is not None else _AUDIT_OFF
    return Extraction(index, prompt_ids, status, generation, text, parse, audit)


async def extract_skills(ctx: PipelineContext, clock: IOClock, task: TaskSpec,
                         turns: list[Turn], success: bool, n_skills: int,
                         sampling: SamplingParams) -> list[Extraction]:
    """`n_skills` extractions from one trajectory, in index order."""
    messages = ctx.adapter.extractor_messages(task, turns, success, skill_schema_text())
    prompt_ids = ctx.tokenizer.encode_prompt(messages)
    prefix = ctx.cfg.pipeline.extractor_reply_prefix
    if prefix:  # prompt side: the extractor sample trains only on what was sampled after it
        prompt_ids = prompt_ids + ctx.tokenizer.encode_text(prefix)
    return list(await asyncio.gather(
        *(_extract_one(ctx, clock, n, prompt_ids, sampling) for n in range(n_skills))))
