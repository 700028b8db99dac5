"""The episode loop with fakes: token/mask/log-prob alignment, statuses, caps, env cleanup."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from evolving_rl.clients.policy import PolicyError
from evolving_rl.core.samples import SampleStatus
from evolving_rl.domains.alfworld import AlfworldAdapter, read_observation
from evolving_rl.pipeline.episode import run_episode
from evolving_rl.pipeline.timing import IOClock
from tests.fakes.context import fake_context, small_config, toy_task
from tests.fakes.scripted import ScriptedPolicy, token_log_prob
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.toy_env import ACTIONS, INTRO, FakeEnvClient

TOK = ByteChatTokenizer()
WIN = "<reasoning>got it</reasoning><action>take mug 1 from desk 1</action>"
WANDER = "<reasoning>hm</reasoning><action>go to shelf 1</action>"


def _play(ctx, card=None):
    sampling = ctx.sampling(ctx.cfg.sampling.solver, solver=True)
    return asyncio.run(run_episode(ctx, IOClock(), toy_task(ctx), card, sampling))


def test_multi_turn_sample_matches_chat_template_and_keeps_sampled_log_probs(tmp_path):
    replies = iter([WANDER, "no tag here", WIN])
    ctx = fake_context(tmp_path, policy=ScriptedPolicy(TOK, lambda _: next(replies)))
    result = _play(ctx)
    assert result.status is SampleStatus.COMPLETED and result.success and result.n_steps == 3
    trace = result.trace
    assert len(trace.response_ids) == len(trace.loss_mask) == len(trace.log_probs)
    for token, mask, log_prob in zip(trace.response_ids, trace.loss_mask, trace.log_probs,
                                     strict=True):
        assert log_prob == (token_log_prob(token) if mask else 0.0)
    # Packed tokens equal the chat template of the whole conversation (no re-tokenisation
    # drift): system + first user, then (assistant reply, user observation) per turn.
    messages = ctx.adapter.solver_messages(toy_task(ctx), _first_observation(), None)
    for step, turn in enumerate(trace.turns[:-1], start=1):
        messages += [{"role": "assistant", "content": turn.model_text},
                     {"role": "user", "content": _observation_block(ctx, step, turn, trace)}]
    expected = TOK.encode_prompt(messages) + TOK.encode(trace.turns[-1].model_text)
    assert trace.prompt_ids + trace.response_ids == expected
    assert result.action_statuses == {"ok": 2, "no_action_tag": 1}
    assert ctx.env.actions[1] == "no tag here"  # sent as-is
    assert ctx.env.open == set() and ctx.env.closed == ["ep0"]


def _first_observation():
    return read_observation({"observation": INTRO.format(goal="game0"),
                             "admissible_commands": ACTIONS})


def _observation_block(ctx, step, turn, trace):
    from evolving_rl.domains.base import Observation
    from tests.fakes.toy_env import ACTIONS

    text = {"go to shelf 1": "You arrive somewhere."}.get(turn.action, "Nothing happens.")
    return ctx.adapter.render_observation(step, Observation(text, tuple(ACTIONS)))


def _card_messages(ctx, card):
    first = _first_observation()
    return ctx.adapter.solver_messages(toy_task(ctx), first, card)


def test_skill_card_goes_into_the_system_prompt(tmp_path):
    ctx = fake_context(tmp_path, policy=ScriptedPolicy(TOK, lambda _: WIN))
    result = _play(ctx, card="### Skill: take the mug")
    system, user = _card_messages(ctx, "### Skill: take the mug")
    assert "### Skill: take the mug" in system["content"]
    assert "### Skill" not in user["content"]
    prompt = TOK.decode(result.trace.prompt_ids)
    assert "### Skill: take the mug" in prompt
    assert "Your task is to: put mug 0 on the desk." in prompt
    assert prompt.count("Your task is to:") == 1  # the env's own task line is not repeated


def test_task_placement_puts_the_card_between_the_task_and_the_first_observation(tmp_path):
    cfg = small_config()
    cfg = dataclasses.replace(cfg, alfworld=dataclasses.replace(cfg.alfworld,
                                                                skill_placement="task"))
    ctx = fake_context(tmp_path, cfg, policy=ScriptedPolicy(TOK, lambda _: WIN))
    result = _play(ctx, card="### Skill: take the mug")
    system, user = _card_messages(ctx, "### Skill: take the mug")
    assert "### Skill" not in system["content"]
    task, card, step = (user["content"].index(text) for text in
                        ("Your task is to:", "### Skill: take the mug", "Step 0."))
    assert task < card < step
    assert TOK.decode(result.trace.prompt_ids).count("### Skill: take the mug") == 1
    assert result.success


def test_unknown_skill_placement_is_refused():
    with pytest.raises(ValueError, match="skill placement"):
        AlfworldAdapter(skill_placement="observation")


class _SlowResets(FakeEnvClient):
    """Resets that take a moment, counting how many run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.running = self.peak = 0

    async def reset(self, body):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1
        return await super().reset(body)


@pytest.mark.parametrize(("bound", "peak"), [(0, 6), (2, 2)])
def test_resets_in_flight_are_bounded_by_max_concurrent_resets(tmp_path, bound, peak):
    cfg = small_config()
    cfg = dataclasses.replace(cfg, pipeline=dataclasses.replace(
        cfg.pipeline, max_concurrent_episodes=6, max_concurrent_resets=bound))
    env = _SlowResets()
    ctx = fake_context(tmp_path, cfg, env=env, policy=ScriptedPolicy(TOK, lambda _: WIN))
    sampling = ctx.sampling(ctx.cfg.sampling.solver, solver=True)

    async def six():
        return await asyncio.gather(*(run_episode(ctx, IOClock(), toy_task(ctx), None, sampling)
                                      for _ in range(6)))

    assert all(result.success for result in asyncio.run(six()))
    assert env.peak == peak


def test_max_steps_truncates_and_scores_zero(tmp_path):
    ctx = fake_context(tmp_path, policy=ScriptedPolicy(TOK, lambda _: WANDER))
    result = _play(ctx)
    assert result.status is SampleStatus.TRUNCATED and result.stop_reason == "max_steps"
    assert result.score == 0.0 and result.n_steps == ctx.cfg.pipeline.max_steps


def test_context_fills_up_and_every_request_fits_the_context(tmp_path):
    seen = []

    class Recording(ScriptedPolicy):
        async def generate(self, prompt_ids, sampling):
            seen.append((len(prompt_ids), sampling.max_new_tokens))
            return await super().generate(prompt_ids, sampling)

    cfg = small_config(max_context_tokens=1100, turn_tokens=300, max_steps=20)
    ctx = fake_context(tmp_path, cfg, policy=Recording(TOK, lambda _: "x" * 1000))
    result = _play(ctx)
    assert result.status is SampleStatus.TRUNCATED and result.stop_reason == "context_limit"
    assert result.trace.length <= 1100
    assert all(n + cap <= 1100 and cap <= 300 for n, cap in seen)


def test_prompt_longer_than_the_context_is_a_context_overflow(tmp_path):
    ctx = fake_context(tmp_path, small_config(max_context_tokens=100, turn_tokens=50))
    result = _play(ctx)
    assert result.status is SampleStatus.CONTEXT_OVERFLOW and result.score is None
    assert result.trace.n_generated == 0 and ctx.env.open == set()


def test_policy_error_is_a_status_and_the_env_episode_is_closed(tmp_path):
    class Failing:
        async def generate(self, prompt_ids, sampling):
            raise PolicyError("boom")

    ctx = fake_context(tmp_path, policy=Failing())
    result = _play(ctx)
    assert result.status is SampleStatus.POLICY_ERROR and result.score is None
    assert ctx.env.open == set()


def test_env_dying_mid_episode_is_an_env_error(tmp_path):
    ctx = fake_context(tmp_path, policy=ScriptedPolicy(TOK, lambda _: WANDER),
                       env=FakeEnvClient(fail_after=2))
    result = _play(ctx)
    assert result.status is SampleStatus.ENV_ERROR and result.score is None
    assert "connection refused" in result.error


def test_cancelled_episode_still_closes_its_env_episode(tmp_path):
    class Hanging:
        async def generate(self, prompt_ids, sampling):
            await asyncio.sleep(60)

    ctx = fake_context(tmp_path, policy=Hanging())

    async def main():
        task = asyncio.ensure_future(run_episode(
            ctx, IOClock(), toy_task(ctx), None,
            ctx.sampling(ctx.cfg.sampling.solver, solver=True)))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert ctx.env.closed == ["ep0"] and ctx.env.open == set()


def test_reply_prefix_opens_every_turn_on_the_prompt_side(tmp_path):
    replies = iter(["go to shelf 1</action>", "take mug 1 from desk 1</action>"])
    cfg = small_config(solver_reply_prefix="<action>")
    ctx = fake_context(tmp_path, cfg, policy=ScriptedPolicy(TOK, lambda _: next(replies)))
    result = _play(ctx)
    assert result.status is SampleStatus.COMPLETED and result.success
    assert result.action_statuses == {"ok": 2}
    trace = result.trace
    prefix = TOK.encode("<action>")
    assert trace.prompt_ids[-len(prefix):] == prefix
    # The second turn's observation block ends with the prefix, masked and with log-prob 0.
    last_reply = len(TOK.encode("take mug 1 from desk 1</action>"))
    opened = slice(-last_reply - len(prefix), -last_reply)
    assert trace.response_ids[opened] == prefix
    assert trace.loss_mask[opened] == [0] * len(prefix)
    assert trace.log_probs[opened] == [0.0] * len(prefix)
    assert trace.loss_mask[-last_reply:] == [1] * last_reply
    assert [turn.model_text for turn in trace.turns] == [
        "<action>go to shelf 1</action>", "<action>take mug 1 from desk 1</action>"]


def test_number_action_format_asks_for_a_number_and_plays_its_command(tmp_path):
    cfg = small_config()
    cfg = dataclasses.replace(cfg, alfworld=dataclasses.replace(cfg.alfworld,
                                                                action_format="number"))
    env = FakeEnvClient()
    number = ACTIONS.index("take mug 1 from desk 1") + 1
    ctx = fake_context(tmp_path, cfg, env=env,
                       policy=ScriptedPolicy(TOK, lambda _: f"<action>{number}</action>"))
    result = _play(ctx)
    system = TOK.decode(result.trace.prompt_ids).split("<|im_end|>")[0]
    assert "Reply with the number of the one action" in system and "<reasoning>" not in system
    assert result.success and env.actions == ["take mug 1 from desk 1"]


def test_number_action_format_needs_lenient_parsing():
    with pytest.raises(ValueError, match="lenient"):
        AlfworldAdapter(lenient=False, action_format="number")
    with pytest.raises(ValueError, match="unknown"):
        AlfworldAdapter(lenient=True, action_format="json")
