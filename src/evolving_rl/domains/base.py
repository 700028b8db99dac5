"""What the environment-agnostic pipeline needs from an environment: the adapter protocol.

Owns the records an adapter exchanges with the episode loop (`TaskSpec`, `Observation`,
`ActionChoice`, `Turn`, `EpisodeTrace`) and the `EnvironmentAdapter` protocol: how a task row
becomes a task, how the env server is reset and stepped, the solver and extractor prompts, the
observation block of each turn, action parsing and how a finished episode is packed into
training samples; the optional capabilities some evaluation protocols need (`ExpertDemonstrations`,
`WrittenSkills`: an adapter offers them by having their methods); and `Domain`, the entry an
environment registers in `domains/registry.py`. Environment names appear only in the modules that
implement them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from evolving_rl.clients.env import EnvClient
from evolving_rl.clients.tokenizer import Message
from evolving_rl.config.schema import Config
from evolving_rl.core.nucleus import Nucleus, NucleusBuilder
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import PrefixCacheCounts, SampleStatus, TrainSample
from evolving_rl.core.skill import SkillFormat


class EnvProtocolError(ValueError):
    """An environment server answered with a body the adapter cannot read."""


@dataclass(frozen=True)
class TaskSpec:
    """One task of a prepared dataset: `question` is its description (the retrieval query)."""

    id: str
    question: str
    task_type: str
    split: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """What the environment shows after a reset or a step."""

    text: str
    actions: tuple[str, ...]  # admissible actions, when the environment lists them
    done: bool = False
    # The episode's score so far: ALFWorld won (1.0) or not; Mind2Web the fraction of the task's
    # steps done correctly.
    score: float = 0.0
    # The reward of the step that led here, for environments that judge every step (Mind2Web:
    # 1.0 when the step was correct); None after a reset and for episode-level environments.
    reward: float | None = None
    info: Mapping[str, Any] = field(default_factory=dict)  # what else the adapter reads


@dataclass(frozen=True)
class ActionChoice:
    """The command sent to the environment and how it was read from the model text."""

    command: str
    valid: bool
    status: str  # a core ActionStatus value


@dataclass(frozen=True)
class Turn:
    """One step of an episode: what the model saw (the observation and the commands offered),
    wrote and sent; `reward` and `info` are those of the observation its action led to."""

    observation: str
    model_text: str
    action: str
    action_status: str
    actions: tuple[str, ...] = ()
    reward: float | None = None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeTrace:
    """The token record of one episode: prompt, then observation blocks and model replies.

    `loss_mask` is 1 on sampled tokens and 0 on observation tokens (log-prob 0.0 there). When the
    generations carry their top-p nucleus (all of them or none), `nucleus` is response-aligned:
    their spans on sampled tokens, empty spans on observation tokens. With step prompts (the
    adapter's `step_prompts`: each step prompted afresh, no dialogue history) the episode's own
    record is the first step's prompt with an empty response, and `steps` holds one record per
    step: its own prompt and its one reply. `prefix_cache` sums its generations' counts.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    top_p_spans: NucleusBuilder | None = None
    steps: list[EpisodeTrace] = field(default_factory=list)
    prefix_cache: PrefixCacheCounts = PrefixCacheCounts()

    def add_observation(self, token_ids: Sequence[int]) -> None:
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([0] * len(token_ids))
        self.log_probs.extend([0.0] * len(token_ids))
        if self.top_p_spans is not None:
            self.top_p_spans.add_empty(len(token_ids))

    def add_generation(self, token_ids: Sequence[int], log_probs: Sequence[float],
                       nucleus: Nucleus | None = None,
                       prefix_cache: PrefixCacheCounts | None = None) -> None:
        if self.n_generated and (nucleus is None) != (self.top_p_spans is None):
            raise ValueError("every generation of an episode carries a nucleus, or none does")
        if nucleus is not None:
            if self.top_p_spans is None:
                self.top_p_spans = NucleusBuilder(len(self.response_ids))
            self.top_p_spans.add(nucleus)
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.log_probs.extend(log_probs)
        if prefix_cache is not None:
            self.prefix_cache += prefix_cache

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def n_generated(self) -> int:
        return sum(self.loss_mask)

    @property
    def nucleus(self) -> Nucleus | None:
        return self.top_p_spans.build() if self.top_p_spans is not None else None


def task_from_row(row: Mapping[str, Any], environment: str) -> TaskSpec:
    """A prepared row as a `TaskSpec`, `metadata.task_type` and `metadata.split` read from its
    metadata (a `ValueError` naming the row when that is not an object)."""
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{environment} row {row.get('id')!r}: metadata must be an object")
    return TaskSpec(id=str(row["id"]), question=str(row["question"]),
                    task_type=str(metadata.get("task_type", "")),
                    split=str(metadata.get("split", "")), metadata=dict(metadata))


def whole_episode_sample(trace: EpisodeTrace, status: SampleStatus, reward: float | None,
                         role: Role, group_id: str,
                         metadata: dict[str, Any]) -> list[TrainSample]:
    """An adapter's `pack` for environments whose episode is one dialogue: the episode is one
    training sample (none when nothing was generated)."""
    if trace.n_generated == 0:
        return []
    return [TrainSample(role=role, prompt_ids=list(trace.prompt_ids),
                        response_ids=list(trace.response_ids), loss_mask=list(trace.loss_mask),
                        log_probs=list(trace.log_probs), reward=reward, group_id=group_id,
                        status=status, metadata=metadata, nucleus=trace.nucleus,
                        prefix_cache=trace.prefix_cache)]


class EnvironmentAdapter(Protocol):
    """The environment-specific half of the episode loop and the rollout."""

    name: str
    stop: tuple[str, ...]  # stop strings of a solver turn
    # False: one dialogue, each observation block appended to the history (ALFWorld). True: every
    # step is prompted afresh by `solver_messages` with the current observation (Mind2Web).
    step_prompts: bool

    def task_from_row(self, row: Mapping[str, Any]) -> TaskSpec: ...

    async def reset(self, env: EnvClient, task: TaskSpec) -> tuple[str, Observation]:
        """Start an episode of `task`: (episode id, first observation)."""
        ...

    async def step(self, env: EnvClient, episode_id: str, command: str) -> Observation: ...

    def solver_messages(self, task: TaskSpec, first: Observation,
                        skill_card: str | None) -> list[Message]: ...

    def render_observation(self, step: int, observation: Observation) -> str: ...

    def parse_action(self, text: str, observation: Observation) -> ActionChoice: ...

    def extractor_messages(self, task: TaskSpec, turns: Sequence[Turn], success: bool,
                           skill_format: SkillFormat) -> list[Message]:
        """The extractor prompt asking for a skill of `skill_format` (domain wording)."""
        ...

    def pack(self, trace: EpisodeTrace, status: SampleStatus, reward: float | None,
             role: Role, group_id: str, metadata: dict[str, Any]) -> list[TrainSample]:
        """Training samples of one finished episode (empty when nothing was generated)."""
        ...

    def for_evaluation(self) -> EnvironmentAdapter:
        """The adapter that plays held-out test tasks (Mind2Web: teacher forced; else `self`)."""
        ...

    def episode_measures(self, turns: Sequence[Turn]) -> dict[str, Any]:
        """What `eval_metrics` needs of one test episode, JSON-able (kept in eval records)."""
        ...

    def eval_metrics(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The environment's own metrics over the `episode_measures` of a split's test episodes,
        beside the success rate every environment reports (Mind2Web: the standard metrics); may
        be empty."""
        ...


@runtime_checkable
class ExpertDemonstrations(Protocol):
    """Optional adapter capability (evaluation protocol `expert_skill`): an expert's commands for
    a task, and the reply in which a solver would send one of them."""

    def expert_commands(self, task: TaskSpec) -> list[str] | None:
        """The expert's command sequence for `task`; None when the task has none."""
        ...

    def expert_reply(self, command: str, observation: Observation) -> str:
        """The model text a solver writes to send `command` at `observation` (the answer format
        the solver prompt asks for), which `parse_action` reads back as `command`."""
        ...


@runtime_checkable
class WrittenSkills(Protocol):
    """Optional adapter capability (evaluation protocol `written_skill`): hand-written skill
    cards, each for a kind of task (ALFWorld: a task type; the probe: a family)."""

    def written_skill_cards(self) -> Mapping[str, str]:
        """Card key -> its rendered skill card, every card validated (a bad file raises
        `ValueError` naming the key)."""
        ...

    def written_skill_key(self, task: TaskSpec) -> str:
        """The key of the card `task` gets."""
        ...


@dataclass(frozen=True)
class Domain:
    """One environment's registry entry (`domains/registry.py` says what each field must do)."""

    name: str  # the config's `environment` value, and the name of its config section
    adapter: Callable[[Config, bool], EnvironmentAdapter]  # (config, lenient action parsing)
    env_url: Callable[[Config], str]  # base URL of its env server
    eval_split: str  # the held-out split the local job evaluates on
    services: str  # dotted name of its server-side module: `prepare_data(cfg)`, `serve(cfg)`
    eval_splits: tuple[str, ...] = ()  # the test splits a checkpoint evaluation covers
    prepare_command: str = ""  # what a user runs to prepare its data (named in errors)
    invalid_actions: str = "invalid actions"  # what the invalid-action penalty counts (reports)
