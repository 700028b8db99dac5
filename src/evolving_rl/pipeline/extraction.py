"""Stage 2: N skill extractions from one source episode, parsed and audited by the core.

Owns `Extraction`, `extract_skills` and `greedy_card` (the solver text of one extraction at
the evaluation's extractor sampling, `sampling.eval_extractor`). The extractor prompt
(adapter-rendered for the skill format `pipeline.skill_format`: task, trajectory, the true
success flag, the schema) is tokenised once and sampled N times concurrently under the
extraction semaphore; each output is parsed by `core.skill` in that format, rendered to its
Markdown card, and the card text (what the solver will read, as in the reference) is audited by
`core.audit`. A failed generation
becomes a status, never an exception. `Extraction.solver_text` is what the solver then reads,
for usable skills and (`pipeline.unusable_skills: as_written`, the reference) unusable ones.
The text parsed is `pipeline.extractor_reply_prefix` (prompt side) + the sampled text +
`pipeline.extractor_reply_suffix` (parser side only): the sampled tokens are all that trains.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from evolving_rl.clients.policy import FinishReason, Generation, PolicyError, SamplingParams
from evolving_rl.core.audit import AuditResult, audit_text
from evolving_rl.core.samples import SampleStatus
from evolving_rl.core.skill import SkillFormat, SkillParseResult, parse_skill, render_skill_card
from evolving_rl.domains.base import TaskSpec, Turn
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.timing import IOClock

logger = logging.getLogger(__name__)

_AUDIT_OFF = AuditResult(True, None, "audit disabled")


@dataclass
class Extraction:
    """One extractor generation and the skill read from it."""

    index: int
    prompt_ids: list[int]
    status: SampleStatus
    skill_format: SkillFormat
    generation: Generation | None = None
    text: str = ""
    parse: SkillParseResult | None = None
    card: str | None = None  # the rendered skill, when it parsed
    audit: AuditResult | None = None
    error: str | None = None
    told_success: bool | None = None  # the success flag its prompt stated

    @property
    def generation_failed(self) -> bool:
        return not self.status.trainable

    @property
    def usable(self) -> bool:
        """Parsed and audited: the solver may play with it."""
        return (not self.generation_failed and self.card is not None
                and self.audit is not None and self.audit.ok)

    def played(self, unusable_skills: str) -> bool:
        """Whether its downstream cells are played (`pipeline.unusable_skills`): always under
        "as_written" (the reference), only when usable under "skip"."""
        return self.usable or unusable_skills == "as_written"

    def solver_text(self, unusable_skills: str) -> str | None:
        """The skill text a played cell's solver reads: the card (of a usable skill, or of one
        that failed the audit), the text as written of one that did not parse, None (no skill)
        for a failed generation or a skill that is not played."""
        if not self.played(unusable_skills) or self.generation_failed:
            return None
        return self.card if self.card is not None else self.text.strip() or None


def _read(ctx: PipelineContext, extraction: Extraction) -> Extraction:
    """Parse the extraction's text, render its card and audit the card text."""
    extraction.parse = parse_skill(extraction.text, extraction.skill_format)
    if extraction.parse.skill is not None:
        extraction.card = render_skill_card(extraction.parse.skill)
        extraction.audit = (audit_text(extraction.card, ctx.audit) if ctx.audit is not None
                            else _AUDIT_OFF)
    return extraction


async def _extract_one(ctx: PipelineContext, clock: IOClock, index: int, prompt_ids: list[int],
                       sampling: SamplingParams) -> Extraction:
    skill_format = SkillFormat(ctx.cfg.pipeline.skill_format)
    room = ctx.cfg.pipeline.max_context_tokens - len(prompt_ids)
    if room <= 0:
        return Extraction(index, prompt_ids, SampleStatus.CONTEXT_OVERFLOW, skill_format,
                          error=f"extractor prompt of {len(prompt_ids)} tokens")
    try:
        async with ctx.limits.extractions:
            with clock.wait("policy"):
                generation = await ctx.policy.generate(prompt_ids, sampling.capped(room))
    except PolicyError as error:
        logger.warning("extraction %d failed: %s", index, error)
        return Extraction(index, prompt_ids, SampleStatus.POLICY_ERROR, skill_format,
                          error=str(error))
    if generation.finish_reason is FinishReason.ABORT:
        return Extraction(index, prompt_ids, SampleStatus.ABORTED, skill_format, generation)
    if not generation.token_ids:
        return Extraction(index, prompt_ids, SampleStatus.EMPTY, skill_format, generation)
    status = (SampleStatus.TRUNCATED if generation.finish_reason is FinishReason.LENGTH
              else SampleStatus.COMPLETED)
    pipeline = ctx.cfg.pipeline
    text = (pipeline.extractor_reply_prefix + ctx.tokenizer.decode(generation.token_ids)
            + pipeline.extractor_reply_suffix)
    return _read(ctx, Extraction(index, prompt_ids, status, skill_format, generation, text))


async def extract_skills(ctx: PipelineContext, clock: IOClock, task: TaskSpec,
                         turns: list[Turn], success: bool, n_skills: int,
                         sampling: SamplingParams) -> list[Extraction]:
    """`n_skills` extractions from one trajectory, in index order."""
    messages = ctx.adapter.extractor_messages(task, turns, success,
                                              SkillFormat(ctx.cfg.pipeline.skill_format))
    prompt_ids = ctx.tokenizer.encode_prompt(messages)
    prefix = ctx.cfg.pipeline.extractor_reply_prefix
    if prefix and ctx.cfg.pipeline.extractor_prefix_in_prompt:
        # prompt side: the extractor sample trains only on what was sampled after it
        prompt_ids = prompt_ids + ctx.tokenizer.encode_text(prefix)
    extractions = list(await asyncio.gather(
        *(_extract_one(ctx, clock, n, prompt_ids, sampling) for n in range(n_skills))))
    for extraction in extractions:
        extraction.told_success = success
    return extractions


async def greedy_card(ctx: PipelineContext, clock: IOClock, task: TaskSpec, turns: list[Turn],
                      success: bool) -> str | None:
    """The solver text of one extraction from `turns` at `sampling.eval_extractor`."""
    (extraction,) = await extract_skills(
        ctx, clock, task, turns, success, 1,
        ctx.sampling(ctx.cfg.sampling.eval_extractor, solver=False))
    return extraction.solver_text(ctx.cfg.pipeline.unusable_skills)
