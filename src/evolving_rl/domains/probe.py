"""Probe adapter: tasks whose right answer is known, to prove that the loop learns (issue 44).

Owns everything the trainer knows about the probe env server (`env/probe/`, contract in its
`app.py`): `/reset {task: id}` answers the question, the observation and the answers `1`..`M`;
`/step {episode_id, action}` takes the chosen answer as a string and ends the episode, its
observation the feedback that reveals the winning answer (kept in the turn's `info`, with
`answer` and `valid`). An episode is one answer, one training sample (`whole_episode_sample`),
scored 1.0 when it won.

- Solver prompt: a one-line system prompt asking for the answer's number in `<action>` tags,
  then "Your task is to: ..." with the skill card (when given) and the observation last, so the
  statement a `stated` task ends with sits right before the reply.
- Actions: the content of the action tag when it is one of the answers; with `lenient` parsing
  (small models, `local.lenient_actions`) the first answer character anywhere in the reply. Any
  other reply is sent as written (the server counts it a wrong answer) and counted by status.
- Extractor prompt: the task, the observation, the reply and the feedback, in either skill
  format (the compact one, or the reference prompt of `skill_prompt`).
- `probe.prompt_layout: canary` (the skill-path canary's profile): the solver's prompt ends with
  the card, after the observation, and the extractor's prompt is only the episode's reply, its
  outcome and the revealed answer, which ends it: what a random character model must read is
  then the last character it sees.
- Hand-written cards (`WrittenSkills`, evaluation protocol `written_skill`), hidden kind: one
  per family, a compact skill card that states the family's answer (`probe.written_card:
  correct`) or another one (`wrong`), from the task generator (`probe_tasks`); the stated kind
  has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evolving_rl.clients.env import EnvClient
from evolving_rl.clients.tokenizer import Message
from evolving_rl.config.schema import Config, ProbeConfig
from evolving_rl.core.actions import ActionStatus, extract_action
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus, TrainSample
from evolving_rl.core.skill import SkillFormat, render_skill_card
from evolving_rl.core.skill_compact import Skill
from evolving_rl.domains.base import (
    ActionChoice,
    Domain,
    EnvProtocolError,
    EpisodeTrace,
    Observation,
    TaskSpec,
    Turn,
    task_from_row,
    whole_episode_sample,
)
from evolving_rl.domains.probe_tasks import family_answers, stated_answer
from evolving_rl.domains.skill_prompt import compact_extractor_messages, reference_extractor_prompt

TASK_PREFIX = "Your task is to:"
MAX_COMMAND_CHARS = 64  # a reply that names no answer is sent as written, up to this length
SOLVER_SYSTEM = ("Reply with the number of the winning answer inside <action>...</action>, "
                 "e.g. <action>2</action>.")
SKILL_INTRO = "A skill learned from a similar task:"
EXTRACTOR_SYSTEM = ("You study an agent's attempt at a task and write one reusable skill that "
                    "would help an agent solve similar tasks. Answer with the JSON object only.")


def read_view(data: Mapping[str, Any]) -> Observation:
    """An episode view (`/reset` or `/step` answer) as an `Observation`."""
    answers, text = data.get("answers"), data.get("observation")
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise EnvProtocolError("env answer: 'answers' must be a list of strings")
    if not isinstance(text, str) or not isinstance(data.get("done"), bool):
        raise EnvProtocolError("env answer lacks string 'observation' or bool 'done'")
    info = ({"feedback": text, "answer": data.get("answer"), "valid": data.get("valid")}
            if data["done"] else {})
    return Observation(text, tuple(answers), done=data["done"],
                       score=1.0 if data.get("won") else 0.0, info=info)


def choose_answer(text: str, answers: Sequence[str], lenient: bool) -> tuple[str | None, str]:
    """(the answer a reply names or None, its `ActionStatus`): the action tag's content, or,
    `lenient`, the first answer character of the reply."""
    content = extract_action(text)
    if content is not None and content in answers:
        return content, ActionStatus.OK
    if lenient:
        for char in text:
            if char in answers:
                return char, ActionStatus.OK
    if content is None:
        return None, ActionStatus.NO_ACTION_TAG
    return None, ActionStatus.EMPTY_ACTION if not content else ActionStatus.NOT_ADMISSIBLE


class ProbeAdapter:
    """`EnvironmentAdapter` for the probe env server (contract in the module docstring)."""

    name = "probe"
    stop = ("</action>",)
    step_prompts = False

    def __init__(self, lenient: bool = True, cfg: ProbeConfig | None = None) -> None:
        self.lenient = lenient
        self.cfg = cfg if cfg is not None else ProbeConfig()

    def task_from_row(self, row: Mapping[str, Any]) -> TaskSpec:
        return task_from_row(row, "probe")

    async def reset(self, env: EnvClient, task: TaskSpec) -> tuple[str, Observation]:
        data = await env.reset({"task": task.id})
        episode_id = data.get("episode_id")
        if not isinstance(episode_id, str):
            raise EnvProtocolError("env answer lacks string field 'episode_id'")
        return episode_id, read_view(data)

    async def step(self, env: EnvClient, episode_id: str, command: str) -> Observation:
        return read_view(await env.step(episode_id, command))

    def solver_messages(self, task: TaskSpec, first: Observation,
                        skill_card: str | None) -> list[Message]:
        user = f"{TASK_PREFIX} {task.question}\n\n"
        if self.cfg.prompt_layout == "canary":
            user += self.render_observation(0, first)
            if skill_card:
                user += f"\n\n{SKILL_INTRO}\n{skill_card}"
            return [{"role": "system", "content": SOLVER_SYSTEM},
                    {"role": "user", "content": user}]
        if skill_card:
            user += f"{SKILL_INTRO}\n{skill_card}\n\n"
        user += self.render_observation(0, first)
        return [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": user}]

    def render_observation(self, step: int, observation: Observation) -> str:
        return observation.text.strip()

    def parse_action(self, text: str, observation: Observation) -> ActionChoice:
        answer, status = choose_answer(text, observation.actions, self.lenient)
        command = answer if answer is not None else text.strip()[:MAX_COMMAND_CHARS]
        return ActionChoice(command, answer is not None, str(status))

    def extractor_messages(self, task: TaskSpec, turns: Sequence[Turn], success: bool,
                           skill_format: SkillFormat) -> list[Message]:
        if self.cfg.prompt_layout == "canary":
            outcome = "success" if success else "failure"
            shown = "".join(f"Action: {turn.action}\nOutcome: {outcome}\n"
                            f"Answer: {turn.info.get('answer')}" for turn in turns)
            return [{"role": "user", "content": shown}]
        trajectory = "\n".join(
            f"Observation: {turn.observation.strip()}\nAction: {turn.action}\n"
            f"Feedback: {turn.info.get('feedback', '(none)')}" for turn in turns)
        trajectory = trajectory or "(no steps)"
        if skill_format is SkillFormat.REFERENCE:
            return [{"role": "user",
                     "content": reference_extractor_prompt(task.question, trajectory, success)}]
        return compact_extractor_messages(EXTRACTOR_SYSTEM, task.question, trajectory, success)

    def pack(self, trace: EpisodeTrace, status: SampleStatus, reward: float | None,
             role: Role, group_id: str, metadata: dict[str, Any]) -> list[TrainSample]:
        return whole_episode_sample(trace, status, reward, role, group_id, metadata)

    def for_evaluation(self) -> ProbeAdapter:
        return self

    def written_skill_cards(self) -> Mapping[str, str]:
        wrong = self.cfg.written_card == "wrong"
        return {family: written_card(family, answer, self.cfg.n_answers, wrong)
                for family, answer in family_answers(self.cfg).items()}

    def written_skill_key(self, task: TaskSpec) -> str:
        return str(task.metadata.get("family", ""))

    def episode_measures(self, turns: Sequence[Turn]) -> dict[str, Any]:
        """The answer the episode sent (whether the solver followed a card; no metric)."""
        return {"chosen": turns[-1].action} if turns else {}

    def eval_metrics(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """None beyond success: a probe task is won or not."""
        return {}


def written_card(family: str, answer: int, n_answers: int, wrong: bool = False) -> str:
    """The rendered card of `family`: its answer, or (`wrong`) the next answer instead."""
    stated = stated_answer(answer, n_answers, wrong)
    return render_skill_card(Skill(
        name=f"The {family} family's answer",
        applicable_when=f"The task asks for the winning answer of the {family} family.",
        steps=(f"The winning answer of the {family} family is {stated}: "
               f"reply <action>{stated}</action>.",)))


def make_probe_adapter(cfg: Config, lenient: bool) -> ProbeAdapter:
    return ProbeAdapter(lenient=lenient, cfg=cfg.probe)


def probe_url(cfg: Config) -> str:
    """The env server's base URL."""
    return f"http://{cfg.probe.host}:{cfg.probe.port}"


DOMAIN = Domain(name="probe", adapter=make_probe_adapter, env_url=probe_url, eval_split="valid",
                eval_splits=("valid",), services="env.probe.service",
                prepare_command="python -m env.probe.service --config <config>",
                invalid_actions="replies naming no answer")
