"""ALFWorld adapter: prompts, observation blocks, action parsing and packing of one episode.

Owns everything the trainer knows about ALFWorld: the prepared row -> `TaskSpec` mapping
(`metadata.game` is what `/reset` loads), reading the env server's answers, the solver's system
prompt and first user message ("Your task is to: ..."; a skill card, when one is given, in the
one `skill_placement` names), the observation block of each turn (step number, observation
text, numbered admissible actions), the `<action>` parsing (`alfworld_actions`; an unparseable
reply is sent as-is and counted), the extractor prompt of each skill format, and packing: one
episode is one training sample. It offers both optional capabilities of `domains.base`: expert
commands (the game file's planner walkthrough, `alfworld_expert`, under `alfworld.data_root`)
with the reply that sends one in the profile's answer format, and the hand-written cards per
task type (`alfworld_written_skills`).
Also its registry entry `DOMAIN` (`domains/registry.py`): the adapter factory, the router's URL, the
held-out split `valid_unseen` and the server-side module `env.alfworld.service`.

Extractor prompts. Reference format: the paper's single user message (`skill_prompt`),
its trajectory the reference's episode text (per step a "[Step i]" / "Observation:" /
"Admissible actions:" block, then the model's reply as written). Compact format: a short system
message, then the task, one "Step i. Observation / Action" line pair per turn, the outcome and
the compact schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evolving_rl.clients.env import EnvClient
from evolving_rl.clients.tokenizer import Message
from evolving_rl.config.schema import AlfworldConfig, Config
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus, TrainSample
from evolving_rl.core.skill import SkillFormat
from evolving_rl.domains.alfworld_actions import parse_alfworld_action
from evolving_rl.domains.alfworld_expert import game_file, read_walkthrough
from evolving_rl.domains.alfworld_written_skills import load_written_skills
from evolving_rl.domains.base import (
    ActionChoice,
    Domain,
    EnvProtocolError,
    EpisodeTrace,
    Observation,
    TaskSpec,
    Turn,
    whole_episode_sample,
)
from evolving_rl.domains.skill_prompt import compact_extractor_messages, reference_extractor_prompt

TASK_PREFIX = "Your task is to:"
MAX_RAW_COMMAND_CHARS = 200  # an unparseable reply is sent as-is, up to this length

SOLVER_INTRO = ("You are an agent in a text-based household environment. Each turn shows the "
                "step number, what you observe and the admissible actions.")
SOLVER_ANSWER = {
    "verbatim": ("First think briefly inside <reasoning>...</reasoning>, then write exactly one "
                 "admissible action, copied verbatim, inside <action>...</action>."),
    "number": ("Reply with the number of the one action you take, inside <action>...</action>, "
               "e.g. <action>3</action>."),
}
SKILL_INTRO = "A skill learned from a similar task; use it if it applies:"
SKILL_PLACEMENTS = ("system", "task")  # AlfworldConfig.skill_placement
EXTRACTOR_SYSTEM = (
    "You study an agent's attempt at a household task and write one reusable skill that "
    "would help an agent solve similar tasks. Answer with the JSON object only.")


def _string(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise EnvProtocolError(f"env answer lacks string field {key!r}")
    return value


def read_observation(data: Mapping[str, Any]) -> Observation:
    """An env server answer (`/reset` or `/step`) as an `Observation`."""
    actions = data.get("admissible_commands")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise EnvProtocolError("env answer: 'admissible_commands' must be a list of strings")
    won = bool(data.get("won", False))
    return Observation(_string(data, "observation"), tuple(actions),
                       done=bool(data.get("done", False)) or won, score=1.0 if won else 0.0)


def strip_task_line(text: str) -> str:
    """The observation without its "Your task is to: ..." line (the prompt states the task)."""
    lines = [line for line in text.splitlines() if not line.strip().startswith(TASK_PREFIX)]
    return "\n".join(lines).strip()


def _reference_step(index: int, turn: Turn) -> str:
    """One step of the trajectory as the reference's episode response holds it: its observation
    block (src/alfworld/generate/episode.py `format_step_observation`), then the model's reply."""
    offered = "\n ".join(f"'{action}'" for action in turn.actions)
    return (f"\n\n[Step {index}]\nObservation: {turn.observation}\n"
            f"Admissible actions: [{offered}]\n\n{turn.model_text}")


def _reference_extractor_messages(task: TaskSpec, turns: Sequence[Turn],
                                  success: bool) -> list[Message]:
    trajectory = "".join(_reference_step(i, turn) for i, turn in enumerate(turns)).strip()
    return [{"role": "user",
             "content": reference_extractor_prompt(task.question, trajectory, success)}]


class AlfworldAdapter:
    """`EnvironmentAdapter` for the ALFWorld router (`/reset {game}`, `/step`, `/close`).

    `lenient` lets a number or a numbered line pick an admissible action (for small models);
    `action_format` is what the system prompt asks for (`SOLVER_ANSWER`: "number" needs lenient);
    `data_root` is where the game files of `metadata.game` lie (expert walkthroughs);
    `skill_placement` where a skill card goes (`AlfworldConfig.skill_placement`).
    """

    name = "alfworld"
    stop = ("</action>",)
    step_prompts = False

    def __init__(self, lenient: bool = False, action_format: str = "verbatim",
                 data_root: str | Path = AlfworldConfig.data_root,
                 skill_placement: str = AlfworldConfig.skill_placement) -> None:
        if action_format not in SOLVER_ANSWER:
            raise ValueError(f"unknown ALFWorld action format {action_format!r}")
        if skill_placement not in SKILL_PLACEMENTS:
            raise ValueError(f"unknown skill placement {skill_placement!r}")
        if action_format == "number" and not lenient:
            raise ValueError("the 'number' action format needs lenient action parsing")
        self.lenient, self.action_format = lenient, action_format
        self.data_root = Path(data_root)
        self.skill_placement = skill_placement
        self.system = f"{SOLVER_INTRO} {SOLVER_ANSWER[action_format]}"

    def task_from_row(self, row: Mapping[str, Any]) -> TaskSpec:
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("game"), str):
            raise ValueError(f"ALFWorld row {row.get('id')!r} lacks metadata.game")
        return TaskSpec(id=str(row["id"]), question=str(row["question"]),
                        task_type=str(metadata.get("task_type", "")),
                        split=str(metadata.get("split", "")), metadata=dict(metadata))

    async def reset(self, env: EnvClient, task: TaskSpec) -> tuple[str, Observation]:
        data = await env.reset({"game": task.metadata["game"]})
        return _string(data, "episode_id"), read_observation(data)

    async def step(self, env: EnvClient, episode_id: str, command: str) -> Observation:
        return read_observation(await env.step(episode_id, command))

    def solver_messages(self, task: TaskSpec, first: Observation,
                        skill_card: str | None) -> list[Message]:
        system, user = self.system, f"{TASK_PREFIX} {task.question}"
        if skill_card and self.skill_placement == "system":
            system = f"{self.system}\n\n{SKILL_INTRO}\n\n{skill_card}"
        elif skill_card:
            user = f"{user}\n\n{SKILL_INTRO}\n\n{skill_card}"
        user = f"{user}\n\n{self.render_observation(0, first)}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def render_observation(self, step: int, observation: Observation) -> str:
        text = strip_task_line(observation.text) if step == 0 else observation.text.strip()
        actions = "\n".join(f"{i}. {a}" for i, a in enumerate(observation.actions, start=1))
        return f"Step {step}.\nObservation: {text}\nAdmissible actions:\n{actions}"

    def parse_action(self, text: str, observation: Observation) -> ActionChoice:
        parsed = parse_alfworld_action(text, observation.actions, lenient=self.lenient,
                                       number_first=self.action_format == "number")
        command = parsed.action if parsed.action is not None else text.strip()
        return ActionChoice(command[:MAX_RAW_COMMAND_CHARS], parsed.ok, str(parsed.status))

    def extractor_messages(self, task: TaskSpec, turns: Sequence[Turn], success: bool,
                           skill_format: SkillFormat) -> list[Message]:
        if skill_format is SkillFormat.REFERENCE:
            return _reference_extractor_messages(task, turns, success)
        steps = "\n".join(
            f"Step {i}. Observation: {turn.observation.strip()}\nAction: {turn.action}"
            for i, turn in enumerate(turns))
        return compact_extractor_messages(EXTRACTOR_SYSTEM, task.question, steps, success)

    def pack(self, trace: EpisodeTrace, status: SampleStatus, reward: float | None,
             role: Role, group_id: str, metadata: dict[str, Any]) -> list[TrainSample]:
        return whole_episode_sample(trace, status, reward, role, group_id, metadata)

    def for_evaluation(self) -> AlfworldAdapter:
        return self

    def expert_commands(self, task: TaskSpec) -> list[str] | None:
        """The planner walkthrough in the task's game file (None when it has none)."""
        return read_walkthrough(game_file(self.data_root, str(task.metadata["game"])))

    def expert_reply(self, command: str, observation: Observation) -> str:
        """`<action>N</action>` (the command's number in the list) under the "number" format
        when the command is listed, else `<action>command</action>`."""
        if self.action_format == "number" and command in observation.actions:
            return f"<action>{observation.actions.index(command) + 1}</action>"
        return f"<action>{command}</action>"

    def written_skill_cards(self) -> Mapping[str, str]:
        return load_written_skills()

    def written_skill_key(self, task: TaskSpec) -> str:
        return task.task_type

    def episode_measures(self, turns: Sequence[Turn]) -> dict[str, Any]:
        return {}

    def eval_metrics(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """None beyond success: an ALFWorld game is won or not."""
        return {}


def make_alfworld_adapter(cfg: Config, lenient: bool) -> AlfworldAdapter:
    return AlfworldAdapter(lenient=lenient, action_format=cfg.alfworld.action_format,
                           data_root=cfg.alfworld.data_root,
                           skill_placement=cfg.alfworld.skill_placement)


def alfworld_url(cfg: Config) -> str:
    """The router's base URL."""
    return f"http://{cfg.alfworld.host}:{cfg.alfworld.port}"


DOMAIN = Domain(name="alfworld", adapter=make_alfworld_adapter, env_url=alfworld_url,
                eval_split="valid_unseen", eval_splits=("valid_seen", "valid_unseen"),
                services="env.alfworld.service",
                prepare_command="bash scripts/alfworld/prepare_data.sh",
                invalid_actions="inadmissible actions")
