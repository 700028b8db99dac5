"""The pipeline context: everything a rollout or an evaluation needs, built once per process.

Owns `PipelineContext` (config, adapter, policy, tokenizer, env and retrieval clients, the task
catalog of the retrieval split and the skill library; the concurrency semaphores and the core's
audit and reward settings it takes from the config itself), `TaskCatalog` (task id ->
`TaskSpec`, from the prepared JSONL files, or from their rows a caller has read already),
`make_adapter` and `build_context`. What is environment-specific (the adapter, the env server's
URL) comes from the configured environment's registry entry (`domains.registry.domain_for`).
Nothing here is global: the hooks or the local backend build a context inside their event loop
and pass it to every call; `close` releases the HTTP pools it opened (the policy belongs to the
caller).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from evolving_rl.clients.env import EnvClient
from evolving_rl.clients.policy import PolicyClient, SamplingParams, SGLangPolicyClient
from evolving_rl.clients.retrieval import RetrievalClient
from evolving_rl.clients.tokenizer import ChatTokenizer, HFChatTokenizer
from evolving_rl.config.loader import ConfigError
from evolving_rl.config.schema import Config, SamplingConfig
from evolving_rl.core.audit import AuditConfig
from evolving_rl.core.rewards import RewardSettings
from evolving_rl.domains.base import EnvironmentAdapter, ExpertDemonstrations, TaskSpec
from evolving_rl.domains.registry import domain_for
from evolving_rl.pipeline.skill_library import SkillLibrary
from evolving_rl.retrieval.prepared import (
    PreparedData,
    PreparedRow,
    prepared_dir_for,
    read_prepared_dir,
)

logger = logging.getLogger(__name__)


class TaskCatalog:
    """Task id -> `TaskSpec` for every row of the prepared split files (first row per id)."""

    def __init__(self, tasks: dict[str, TaskSpec]) -> None:
        self._tasks = tasks

    @classmethod
    def load(cls, prepared_dir: str | Path, adapter: EnvironmentAdapter) -> TaskCatalog:
        return cls.of_splits(read_prepared_dir(prepared_dir), adapter)

    @classmethod
    def of_splits(cls, splits: dict[str, list[PreparedRow]],
                  adapter: EnvironmentAdapter) -> TaskCatalog:
        """The catalog of split name -> rows already read."""
        tasks: dict[str, TaskSpec] = {}
        for rows in splits.values():
            for row in rows:
                if row.id not in tasks:
                    tasks[row.id] = adapter.task_from_row(row.as_dict())
        return cls(tasks)

    def get(self, task_id: str) -> TaskSpec | None:
        return self._tasks.get(task_id)

    def __len__(self) -> int:
        return len(self._tasks)


@dataclass
class ConcurrencyLimits:
    """Concurrency bounds, shared by every rollout of one context."""

    episodes: asyncio.Semaphore
    extractions: asyncio.Semaphore
    resets: asyncio.Semaphore  # `pipeline.max_concurrent_resets` (0: as many as episodes)


def _audit_config(cfg: Config) -> AuditConfig | None:
    """The audit settings (config `audit` is a core `AuditConfig`); None: the audit is disabled."""
    return cfg.audit if cfg.audit.enabled else None


@dataclass
class PipelineContext:
    """Long-lived collaborators of the pipeline (see the module docstring)."""

    cfg: Config
    adapter: EnvironmentAdapter
    policy: PolicyClient
    tokenizer: ChatTokenizer
    env: EnvClient
    retrieval: RetrievalClient
    catalog: TaskCatalog
    library: SkillLibrary
    owned_policy: SGLangPolicyClient | None = None  # opened by build_context, closed by close
    limits: ConcurrencyLimits = field(init=False)
    audit: AuditConfig | None = field(init=False)  # None: the audit is disabled
    rewards: RewardSettings = field(init=False)  # config `rewards`, the core's type

    def __post_init__(self) -> None:
        pipeline = self.cfg.pipeline
        self.limits = ConcurrencyLimits(
            asyncio.Semaphore(pipeline.max_concurrent_episodes),
            asyncio.Semaphore(pipeline.max_concurrent_extractions),
            asyncio.Semaphore(pipeline.max_concurrent_resets
                              or pipeline.max_concurrent_episodes))
        self.audit = _audit_config(self.cfg)
        self.rewards = self.cfg.rewards

    def sampling(self, cfg: SamplingConfig, solver: bool) -> SamplingParams:
        """Sampling parameters of a role; solver turns stop at the adapter's stop strings."""
        return SamplingParams.from_config(cfg, self.adapter.stop if solver else ())

    async def close(self) -> None:
        await self.env.close()
        await self.retrieval.close()
        if self.owned_policy is not None:
            await self.owned_policy.close()


def make_adapter(cfg: Config, lenient: bool = False) -> EnvironmentAdapter:
    """The configured environment's adapter; `lenient` action parsing for small models."""
    return domain_for(cfg).adapter(cfg, lenient)


def _check_teacher(cfg: Config, adapter: EnvironmentAdapter) -> None:
    """The teacher switch needs a dialogue history, the solver sampled at temperature 1 (the
    teacher's log-probs are the raw model's: SGLang scores input tokens unscaled) and, for expert
    cards, an adapter with expert trajectories."""
    if cfg.pipeline.skill_use != "teacher":
        return
    if adapter.step_prompts:
        raise ConfigError("pipeline.skill_use", f"teacher needs an environment with a dialogue "
                          f"history; {adapter.name} prompts every step afresh")
    if cfg.sampling.solver.temperature != 1.0:
        raise ConfigError("sampling.solver.temperature", "must be 1.0 under pipeline.skill_use: "
                          "teacher (the teacher's log-probs are at temperature 1)")
    if cfg.pipeline.teacher_skill == "expert" and not isinstance(adapter, ExpertDemonstrations):
        raise ConfigError("pipeline.teacher_skill", f"expert needs expert trajectories; "
                          f"{adapter.name} has none")


async def build_context(cfg: Config, policy: PolicyClient | None = None,
                        tokenizer: ChatTokenizer | None = None, *, policy_url: str | None = None,
                        tokenizer_path: str | None = None,
                        adapter: EnvironmentAdapter | None = None,
                        run_dir: str | Path | None = None,
                        top_p_replay: bool = False,
                        prepared: PreparedData | None = None) -> PipelineContext:
    """Open the env and retrieval clients and load the task catalog; call inside the loop.

    Give `policy` or `policy_url` (an SGLang server or router, opened and owned by the context;
    `top_p_replay` makes it ask for the nucleus of top-p < 1 generations), and `tokenizer` or
    `tokenizer_path` (a Hugging Face tokenizer folder). The catalog is read from the prepared
    files unless `prepared` holds them already.
    """
    domain = domain_for(cfg)  # first: an unregistered environment fails before anything opens
    owned = None
    if policy is None:
        if policy_url is None:
            raise ValueError("build_context needs a policy or a policy_url")
        policy = owned = SGLangPolicyClient.open(policy_url, cfg.clients, top_p_replay)
    if tokenizer is None:
        if tokenizer_path is None:
            raise ValueError("build_context needs a tokenizer or a tokenizer_path")
        tokenizer = HFChatTokenizer.from_pretrained(tokenizer_path)
    adapter = adapter or domain.adapter(cfg, False)
    _check_teacher(cfg, adapter)
    catalog = (TaskCatalog.of_splits(prepared.indexed, adapter) if prepared is not None
               else TaskCatalog.load(prepared_dir_for(cfg), adapter))
    logger.info("pipeline context: %s, %d tasks in the catalog", adapter.name, len(catalog))
    return PipelineContext(
        cfg=cfg, adapter=adapter, policy=policy, tokenizer=tokenizer,
        env=EnvClient.open(domain.env_url(cfg), cfg.clients),
        retrieval=RetrievalClient.open(f"http://{cfg.retrieval.host}:{cfg.retrieval.port}",
                                       cfg.clients),
        catalog=catalog, library=SkillLibrary.in_run_dir(run_dir or cfg.run.output_dir),
        owned_policy=owned)
