"""Skill extraction with fakes: the reply prefix is prompt-side and the parser sees it."""

from __future__ import annotations

import asyncio

from evolving_rl.pipeline.extraction import extract_skills
from evolving_rl.pipeline.timing import IOClock
from tests.fakes.context import fake_context, small_config, toy_task
from tests.fakes.scripted import ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()
PREFIX = '{"name": "'
TAIL = ('Find then place", "applicable_when": "a task asks to put an object somewhere", '
        '"steps": ["go to where the object is", "take it", "put it in place"], "pitfalls": []}')


def test_extractor_reply_prefix_is_prompt_side_and_parsed(tmp_path):
    ctx = fake_context(tmp_path, small_config(extractor_reply_prefix=PREFIX),
                       policy=ScriptedPolicy(TOK, lambda _: TAIL))
    sampling = ctx.sampling(ctx.cfg.sampling.extractor, solver=False)
    extractions = asyncio.run(
        extract_skills(ctx, IOClock(), toy_task(ctx), [], False, 2, sampling))
    assert len(extractions) == 2
    for extraction in extractions:
        assert extraction.usable and extraction.parse.skill.name == "Find then place"
        assert extraction.prompt_ids[-len(TOK.encode(PREFIX)):] == TOK.encode(PREFIX)
        # Only the sampled ids (the tail, then the end-of-turn token) are the response.
        assert list(extraction.generation.token_ids) == [*TOK.encode(TAIL), TOK.eos_token_id]
        assert extraction.text == PREFIX + TAIL
