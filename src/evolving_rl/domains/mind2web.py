"""Mind2Web adapter: step prompts, the env server's episode views, actions and per-step samples.

Owns everything the trainer knows about Mind2Web (the env server's wire contract: `/reset {task:
annotation_id, mode}` and `/step {episode_id, action: {op, ref, value}}` answer episode views).

- Prompts in the reference's shape (Fanzy27/Evolving-RL src/web/prompts.py and
  src/web/generate/episode.py): every step is its own prompt, no dialogue history: the system
  prompt (the reference's two solver prompts, without and with the skill card, their wording kept;
  refs read `[e12]` because our snapshot lines start with the ref), then one user message:
  "Your task is to: ..." and the step block `render_observation` writes ("[Step i]", the task,
  the page snapshot, the previous actions, the action format). The reference appended that block
  after the chat template's assistant header; we put it in the user turn.
- Actions: `mind2web_actions.parse_web_action` (JSON in `<action>` tags, or `OP eN | value`); the
  command passed around is the action's text form, sent as the wire object. A reply without a
  readable action is counted by its status and sent as `NO_ACTION`, a click on a ref no
  snapshot holds, so that the server judges it a wrong step (a model failure, never an env error).
- Scores: an observation's `reward` is 1.0 when the step that led to it was correct; its
  `score` is the episode's fraction of the task's steps done correctly (`steps_correct /
  n_steps`): the extractor's downstream score; an episode succeeds when every step was correct.
- Packing: one training sample per step (its prompt and its one reply), reward 1.0 when that
  step was correct, minus `rewards.invalid_action_penalty` when its reply held no readable
  action (0 in the paper profile; the CPU profile's shaping for a 135M model),
  `metadata.step_index` set (for `pipeline.solver_grouping: step_index`).
- Extractor prompt: the reference web wording (`mind2web_skill_prompt`) or the compact one; the
  trajectory is each step's page snapshot and the model's reply, never gold information (no
  previous gold actions, no per-step verdicts), compressed to `trajectory_chars`: every step gets
  an equal share, replies cut to half of it, snapshots cut by whole lines to the rest.
- Evaluation: `for_evaluation` is this adapter in "eval" mode (teacher forced); `eval_metrics`
  gives the standard metrics of a split's episodes from `step_outcomes` (each judged step as a
  `mind2web_metrics.StepOutcome`; an unreadable reply scores 0) and the reference's first-error
  action accuracy (`first_error_counts`). The element is judged from the server's match under
  the standard rule (MindAct: a step without positive candidates has no right element) and,
  as `reference_fallback_*`, under the reference's fallback on such steps, whatever rule the
  server trains with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evolving_rl.clients.env import EnvClient
from evolving_rl.clients.tokenizer import Message
from evolving_rl.config.schema import Config
from evolving_rl.core.actions import ActionStatus
from evolving_rl.core.rewards import solver_reward
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus, TrainSample
from evolving_rl.core.skill import SkillFormat
from evolving_rl.domains.base import (
    ActionChoice,
    Domain,
    EnvProtocolError,
    EpisodeTrace,
    Observation,
    TaskSpec,
    Turn,
    task_from_row,
)
from evolving_rl.domains.mind2web_actions import WebAction, parse_web_action
from evolving_rl.domains.mind2web_metrics import (
    REFERENCE_FALLBACK,
    STANDARD,
    StepOutcome,
    element_correct,
    first_error_action_accuracy,
    split_metrics,
)
from evolving_rl.domains.mind2web_skill_prompt import reference_extractor_prompt
from evolving_rl.domains.skill_prompt import compact_extractor_messages

TASK_PREFIX = "Your task is to:"
MODES = ("train", "eval")
# Refs count from e1 and the server reads refs of up to 7 digits: no snapshot holds this one.
NO_ACTION = WebAction("CLICK", "e9999999")
CHARS_PER_TOKEN = 3  # a conservative characters-per-token ratio for the extractor's budget
EXTRACTOR_PROMPT_TOKENS = 2048  # room kept for the extractor's instructions and schema

ACTION_FORMAT = ('Use JSON inside <action>...</action> with one of:\n'
                 '- {"op":"CLICK","ref":"e12"}\n'
                 '- {"op":"TYPE","ref":"e7","value":"text to type"}\n'
                 '- {"op":"SELECT","ref":"e9","value":"option text"}')
_OPERATIONS = ("Allowed operations:\n"
               '- CLICK: {"op":"CLICK","ref":"e12"}\n'
               '- TYPE: {"op":"TYPE","ref":"e7","value":"text to type"}\n'
               '- SELECT: {"op":"SELECT","ref":"e9","value":"option text"}\n\n')
_INTRO = ("You are an intelligent agent in a web browsing environment. "
          "Your goal is to complete the user's web task step by step.\n\n")
SOLVER_SYSTEM = (
    f"{_INTRO}At each step, you will receive a compact interactive page snapshot. "
    "Each actionable element is identified by a ref like [e12]. "
    "You must choose actions only from the refs that appear in the current observation.\n\n"
    "You MUST first reason inside <reasoning> and </reasoning> tags. "
    "Then output exactly one JSON action inside <action> and </action> tags.\n\n"
    f"{_OPERATIONS}Do not invent refs. Do not output multiple actions. "
    "If the page contains many options, pick the single best next action.")
SOLVER_WITH_SKILL_SYSTEM = (
    f"{_INTRO}At each step, you will receive a compact interactive page snapshot with refs like "
    "[e12]. You MUST first reason step-by-step about the current situation inside <reasoning> "
    "and </reasoning> tags. Then output exactly one JSON action inside <action> and </action> "
    f"tags.\n\n{_OPERATIONS}You must choose actions only from refs that appear in the current "
    "observation. Do not invent refs. Do not output multiple actions.\n\n"
    "A relevant skill extracted from a previous similar task is provided below for your "
    "reference. In your reasoning, you MUST explicitly analyze whether the provided skill is "
    "applicable.\n\nExample output format:\n<reasoning>\nI should first check whether the "
    "reference skill applies to this page and task state. The next actionable control is the "
    "location textbox, so typing there is the best next step.\n</reasoning>\n"
    '<action>{"op":"CLICK","ref":"e12"}</action>\n\nReference Skill:\n')
EXTRACTOR_SYSTEM = (
    "You study an agent's attempt at a web task and write one reusable skill that would help "
    "an agent solve similar web tasks. Answer with the JSON object only.")


def _field(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise EnvProtocolError(f"env answer lacks {kind.__name__} field {key!r}")
    return value


def _verdict(data: Mapping[str, Any]) -> dict[str, Any] | None:
    result = data.get("result")
    if result is None:
        return None
    if not isinstance(result, dict) or not isinstance(result.get("correct"), bool):
        raise EnvProtocolError("env answer: 'result' must be an object with a bool 'correct'")
    return result


def read_view(data: Mapping[str, Any]) -> Observation:
    """An episode view (`/reset` or `/step` answer) as an `Observation` (rules above)."""
    n_steps, correct = _field(data, "n_steps", int), _field(data, "steps_correct", int)
    previous = _field(data, "previous_actions", list)
    if not all(isinstance(action, str) for action in previous):
        raise EnvProtocolError("env answer: 'previous_actions' must be a list of strings")
    if n_steps < 1 or not 0 <= correct <= n_steps:
        raise EnvProtocolError(f"env answer: steps_correct={correct} of n_steps={n_steps}")
    result = _verdict(data)
    info = {"step": _field(data, "step", int), "n_steps": n_steps, "steps_correct": correct,
            "task": _field(data, "task", str), "previous_actions": tuple(previous),
            "result": result}
    return Observation(_field(data, "observation", str), (), done=_field(data, "done", bool),
                       score=correct / n_steps,
                       reward=None if result is None else float(result["correct"]), info=info)


def _truncate_lines(text: str, limit: int) -> str:
    """`text` cut to whole lines within `limit` characters, saying how many lines were cut."""
    if len(text) <= limit:
        return text
    kept: list[str] = []
    lines = text.splitlines()
    size = 0
    for line in lines:
        if size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join([*kept, f"... ({len(lines) - len(kept)} more lines)"])


def _trajectory(turns: Sequence[Turn], budget: int) -> str:
    """Each step's page snapshot and the model's reply, within `budget` characters."""
    share = budget // max(len(turns), 1)
    blocks = []
    for index, turn in enumerate(turns):
        reply = turn.model_text.strip()
        reply = reply if len(reply) <= share // 2 else reply[: share // 2] + " ..."
        page = _truncate_lines(turn.observation.strip(), max(share - len(reply), 0))
        blocks.append(f"[Step {index}]\nCurrent page snapshot:\n{page}\n\n{reply}")
    return "\n\n".join(blocks)


def step_outcomes(turns: Sequence[Turn], rule: str = STANDARD) -> list[StepOutcome]:
    """The judged steps of an episode (turns the server answered), for `mind2web_metrics`, the
    element judged from the server's match under the empty-positive `rule`.

    A reply without a readable action scores nothing on that step: it was sent as `NO_ACTION`,
    whose CLICK would otherwise earn the operation F1 of a gold click.
    """
    outcomes = []
    for turn in turns:
        result = turn.info.get("result")
        if not isinstance(result, dict):
            continue
        if turn.action_status != ActionStatus.OK:
            outcomes.append(StepOutcome(False, 0.0))
        else:
            outcomes.append(StepOutcome(element_correct(str(result.get("match", "none")), rule),
                                        float(result.get("op_f1", 0.0))))
    return outcomes


def first_error_counts(turns: Sequence[Turn]) -> tuple[int, int]:
    """(steps correct, steps attempted) of an episode cut at its first wrong step: what the
    reference's environment, which stops there, would have counted on a teacher-forced episode
    (the steps before the first error saw the same pages in both modes)."""
    verdicts = [bool(turn.info["result"]["correct"]) for turn in turns
                if isinstance(turn.info.get("result"), dict)]
    correct = verdicts.index(False) if False in verdicts else len(verdicts)
    return correct, min(correct + 1, len(verdicts))


class Mind2WebAdapter:
    """`EnvironmentAdapter` for the Mind2Web env server (contract in the module docstring).

    `mode` "train" ends an episode at its first wrong step (the reference's environment); "eval"
    plays every step along the gold path (teacher forced), for the standard metrics.
    """

    name = "mind2web"
    stop = ("</action>",)
    step_prompts = True

    def __init__(self, mode: str = "train", trajectory_chars: int = 24000,
                 invalid_action_penalty: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown Mind2Web mode {mode!r}")
        if trajectory_chars < 1:
            raise ValueError(f"trajectory_chars must be >= 1, got {trajectory_chars}")
        self.mode, self.trajectory_chars = mode, trajectory_chars
        self.invalid_action_penalty = invalid_action_penalty

    def task_from_row(self, row: Mapping[str, Any]) -> TaskSpec:
        return task_from_row(row, "Mind2Web")

    async def reset(self, env: EnvClient, task: TaskSpec) -> tuple[str, Observation]:
        data = await env.reset({"task": task.id, "mode": self.mode})
        return _field(data, "episode_id", str), read_view(data)

    async def step(self, env: EnvClient, episode_id: str, command: str) -> Observation:
        parsed = parse_web_action(f"<action>{command}</action>")
        action = parsed.action if parsed.action is not None else NO_ACTION
        return read_view(await env.step(episode_id, action.to_wire()))

    def solver_messages(self, task: TaskSpec, first: Observation,
                        skill_card: str | None) -> list[Message]:
        system = f"{SOLVER_WITH_SKILL_SYSTEM}{skill_card}" if skill_card else SOLVER_SYSTEM
        step = int(first.info.get("step", 0))
        user = f"{TASK_PREFIX} {task.question}\n\n{self.render_observation(step, first)}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def render_observation(self, step: int, observation: Observation) -> str:
        previous = "\n".join(observation.info.get("previous_actions", ())) or "None"
        task = observation.info.get("task") or "Unknown task"
        return (f"[Step {step}]\nCurrent task:\n{task}\n\nCurrent page snapshot:\n"
                f"{observation.text}\n\nPrevious actions:\n{previous}\n\n"
                f"Action format:\n{ACTION_FORMAT}")

    def parse_action(self, text: str, observation: Observation) -> ActionChoice:
        parsed = parse_web_action(text)
        action = parsed.action if parsed.action is not None else NO_ACTION
        return ActionChoice(action.as_text(), parsed.ok, str(parsed.status))

    def extractor_messages(self, task: TaskSpec, turns: Sequence[Turn], success: bool,
                           skill_format: SkillFormat) -> list[Message]:
        trajectory = _trajectory(turns, self.trajectory_chars) or "(no steps)"
        if skill_format is SkillFormat.REFERENCE:
            return [{"role": "user",
                     "content": reference_extractor_prompt(task.question, trajectory, success)}]
        return compact_extractor_messages(EXTRACTOR_SYSTEM, task.question, trajectory, success)

    def pack(self, trace: EpisodeTrace, status: SampleStatus, reward: float | None,
             role: Role, group_id: str, metadata: dict[str, Any]) -> list[TrainSample]:
        samples = []
        # the last step has no turn when its generation failed (its samples leave anyway)
        for index, (step, turn) in enumerate(zip(trace.steps, trace.turns, strict=False)):
            if step.n_generated == 0:
                continue
            # a step the server never judged (the episode stopped on it) counts as not correct
            unreadable = float(turn.action_status != ActionStatus.OK)
            step_reward = None if reward is None else solver_reward(
                bool(turn.reward), unreadable, self.invalid_action_penalty)
            samples.append(TrainSample(
                role=role, prompt_ids=list(step.prompt_ids), response_ids=list(step.response_ids),
                loss_mask=list(step.loss_mask), log_probs=list(step.log_probs),
                reward=step_reward, group_id=group_id, status=status,
                metadata={**metadata, "step_index": index, "step_correct": bool(turn.reward),
                          "action_status": turn.action_status},
                nucleus=step.nucleus, prefix_cache=step.prefix_cache))
        return samples

    def for_evaluation(self) -> Mind2WebAdapter:
        """The same adapter in "eval" mode: every step played along the gold path."""
        return Mind2WebAdapter(mode="eval", trajectory_chars=self.trajectory_chars,
                               invalid_action_penalty=self.invalid_action_penalty)

    def episode_measures(self, turns: Sequence[Turn]) -> dict[str, Any]:
        """Each judged step as [element correct, operation F1, element correct under the
        reference's fallback], and the first-error counts."""
        fallback = step_outcomes(turns, REFERENCE_FALLBACK)
        return {"steps": [[o.element_correct, o.op_f1, f.element_correct]
                          for o, f in zip(step_outcomes(turns), fallback, strict=True)],
                "first_error": list(first_error_counts(turns))}

    def eval_metrics(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The standard metrics (macro over episodes), the same under the reference's fallback
        on steps without a positive candidate (`reference_fallback_*`) and the reference's
        first-error action accuracy, named apart (`mind2web_metrics`); needs teacher-forced
        episodes. A step recorded before the fallback was (two items) counts alike in both."""
        if not episodes:
            return {}
        metrics = {}
        for column, prefix in ((0, ""), (2, f"{REFERENCE_FALLBACK}_")):
            metrics |= split_metrics(_recorded_outcomes(episodes, column)).as_dict(prefix)
            metrics.pop(f"{prefix}n_tasks")
        metrics["first_error_action_accuracy"] = first_error_action_accuracy(
            [tuple(episode["first_error"]) for episode in episodes])
        return metrics


def _recorded_outcomes(episodes: Sequence[Mapping[str, Any]],
                       column: int) -> list[list[StepOutcome]]:
    """Recorded steps as outcomes, the element verdict read from `column` (the first when a
    step has no such column)."""
    return [[StepOutcome(bool(step[column] if column < len(step) else step[0]), float(step[1]))
             for step in episode["steps"]] for episode in episodes]


def trajectory_budget(cfg: Config) -> int:
    """Characters of trajectory the extractor's context holds next to its instructions."""
    tokens = (cfg.pipeline.max_context_tokens - cfg.sampling.extractor.max_new_tokens
              - EXTRACTOR_PROMPT_TOKENS)
    return max(tokens, 256) * CHARS_PER_TOKEN


def make_mind2web_adapter(cfg: Config, lenient: bool) -> Mind2WebAdapter:
    """The training adapter (`lenient` is unused: the web parser reads both action forms)."""
    return Mind2WebAdapter(mode="train", trajectory_chars=trajectory_budget(cfg),
                           invalid_action_penalty=cfg.rewards.invalid_action_penalty)


def mind2web_url(cfg: Config) -> str:
    """The env server's base URL."""
    return f"http://{cfg.mind2web.host}:{cfg.mind2web.port}"


DOMAIN = Domain(name="mind2web", adapter=make_mind2web_adapter, env_url=mind2web_url,
                eval_split="test_task",
                eval_splits=("test_task", "test_website", "test_domain"),
                services="env.mind2web.service",
                prepare_command="bash scripts/web/prepare_data.sh",
                invalid_actions="unreadable actions (no tag, empty or malformed)")
