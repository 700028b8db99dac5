"""The main job of the embedded backend, end to end on one machine (`python -m evolving_rl.local`).

Owns the sequence and nothing of what each stage does:

1. data — the configured environment's `prepare_data(cfg)` (its registry entry's server-side
   module, `domains.registry`; ALFWorld's generates a small game set when the data root holds
   none, then writes the prepared splits);
2. retrieval cache — `local.servers.build_retrieval_cache` with the configured encoder
   (MiniLM from its PyPI package on the CPU default), skipped when the cache already holds the
   prepared tasks embedded by that model;
3. servers — retrieval and the environment's servers (`local.servers`), started with this
   job's `Config`; both stopped on exit, by the launchers that know the PIDs they started;
4. model — policy, frozen reference and trainer (`evolving_rl.local.model` / `trainer`),
   optionally resumed from a checkpoint;
5. training — evaluation on the entry's held-out split before, `local.train_steps` rollouts of
   the four-stage pipeline with the in-process policy, one GRPO step each, evaluation after,
   checkpoint, plot.
Every record goes to `<run>/metrics.jsonl` (its numbers also to TensorBoard event files under
`<run>/tensorboard/` with `run.tensorboard`, and to W&B when configured: `local.scalars`);
skills to `<run>/skill_library.jsonl`; the validated config the run used (overrides applied) to
`<run>/config.yaml`.

Before any of it, `local.preflight` checks every port the servers will bind, the devices, the
models and paths the job reads and the disk its checkpoints need, and refuses to start (naming
the config key to `--set`) with nothing written or moved; then it takes the folder's lock
(`local.run_lock`: a second job on the folder exits 2 naming this one), and only then is an
earlier run in the folder moved, whole, into a new `<run>/previous-<UTC time>/` (an archive is
never written into again).

A config whose trained roles sample at top-p < 1 is refused before any stage (`check_sampling`):
the in-process decoder samples from the nucleus but returns, and the trainer recomputes, log-probs
of the full distribution, so PPO's old log-probs would not be those of the sampling policy. The
slime path replays the nucleus instead (`evolving_rl.core.nucleus`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml
from tqdm import tqdm

from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config import ConfigError, to_dict
from evolving_rl.config.schema import Config, LocalConfig
from evolving_rl.domains.registry import domain_for
from evolving_rl.local.distill_calibration import DistillCalibration
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.metrics import MetricsLog, group_variance
from evolving_rl.local.model import frozen_copy, load_model, load_tokenizer, resolve_model_path
from evolving_rl.local.nonfinite import capture_skipped_step
from evolving_rl.local.plot_style import reward_subtitle
from evolving_rl.local.plots import plot_run
from evolving_rl.local.preflight import preflight
from evolving_rl.local.run_lock import LOCK_FILE, hold
from evolving_rl.local.scalars import open_sinks
from evolving_rl.local.servers import build_retrieval_cache, env_services, servers
from evolving_rl.local.trainer import GRPOTrainer, seed_everything
from evolving_rl.pipeline.context import PipelineContext, build_context, make_adapter
from evolving_rl.pipeline.evaluation import EvalPlan, EvalProtocol, run_eval
from evolving_rl.pipeline.rollout import run_training_rollout
from evolving_rl.retrieval.prepared import PreparedData, environment_prepared_dir, round_robin

logger = logging.getLogger(__name__)


@dataclass
class JobResult:
    """What the run measured and where it wrote it (the summary is rendered from this)."""

    run_dir: Path
    stage_s: dict[str, float] = field(default_factory=dict)
    before: list[dict[str, Any]] = field(default_factory=list)  # one eval record a protocol
    after: list[dict[str, Any]] = field(default_factory=list)
    train: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path | None = None
    plot: Path | None = None


@contextlib.contextmanager
def timed(result: JobResult, stage: str) -> Iterator[None]:
    started = time.perf_counter()
    logger.info("stage %s ...", stage)
    yield
    result.stage_s[stage] = time.perf_counter() - started
    logger.info("stage %s done in %.1fs", stage, result.stage_s[stage])


def eval_rows(cfg: Config, prepared: PreparedData) -> list[dict[str, Any]]:
    """`local.n_eval_games` tasks of the environment's held-out split, taken round-robin over
    task types (deterministic)."""
    return round_robin(prepared.split(domain_for(cfg).eval_split), cfg.local.n_eval_games)


def check_eval_rows(cfg: Config, prepared: PreparedData) -> None:
    """A `ConfigError` (exit 2) when `local.n_eval_games` asks for an evaluation but the held-out
    split holds no task: the evaluations would score 0 cases and the run would train on."""
    split = domain_for(cfg).eval_split
    if cfg.local.n_eval_games and not eval_rows(cfg, prepared):
        path = environment_prepared_dir(cfg) / f"{split}.jsonl"
        raise ConfigError("", f"the held-out split {split!r} ({path}) holds no task, so the "
                          "evaluation would score 0 cases (a data set whose generation was "
                          "interrupted?); make the data again, or point the config at complete "
                          "data")


def splits_of(rows: list[dict[str, Any]]) -> str:
    """The prepared splits `rows` come from (their `metadata.split`), comma-separated."""
    return ",".join(sorted({str(row["metadata"].get("split", "")) for row in rows}))


@dataclass
class Models:
    """The policy (trained in place and sampled from), its tokenizer and the trainer."""

    tokenizer: Any
    policy: LocalPolicy
    trainer: GRPOTrainer


def reference_model(model: torch.nn.Module, path: Path, start: Path,
                    local: LocalConfig) -> torch.nn.Module:
    """The frozen KL reference, the initial weights in `path`: a copy of `model` when it was just
    loaded from them (one load), loaded again when `model` resumes from a checkpoint `start`."""
    if start == path:
        return frozen_copy(model)
    return load_model(path, local.device, local.dtype, trainable=False)


def load_models(cfg: Config) -> Models:
    local = cfg.local
    path = resolve_model_path(local.model, local.models_dir)
    tokenizer = load_tokenizer(path)
    start = Path(local.resume_from) if local.resume_from else path
    model = load_model(start, local.device, local.dtype,
                       random_seed=cfg.run.seed if local.random_init else None)
    uses_kl = cfg.loss.kl_coef.solver > 0 or cfg.loss.kl_coef.extractor > 0
    ref = reference_model(model, path, start, local) if uses_kl else None
    trainer = GRPOTrainer(model, ref, cfg.loss, local, int(tokenizer.pad_token_id))
    if local.resume_from:
        trainer.load_state(start)
        logger.info("resumed from %s at step %d", start, trainer.step_count)
    policy = LocalPolicy(model, tokenizer, local, seed=cfg.run.seed)
    return Models(tokenizer, policy, trainer)


def training_types(cfg: Config, prepared: PreparedData) -> frozenset[str]:
    """The task types training draws its source tasks from (`pipeline.retrieval_split`); the
    evaluations call every other type held out."""
    return frozenset(row.task_type for row in prepared.split(cfg.pipeline.retrieval_split))


async def _evaluate(ctx: PipelineContext, models: Models, log: MetricsLog, prepared: PreparedData,
                    phase: str) -> list[dict[str, Any]]:
    """Every protocol of the phase (`local.eval_protocols_<phase>`) at once on the held-out
    rows; returns their `eval` records, one a protocol, each naming the split its rows came from
    (the policy's generation stats on the first)."""
    cfg = ctx.cfg
    protocols = {"before": cfg.local.eval_protocols_before,
                 "after": cfg.local.eval_protocols_after}[phase]
    rows, types = eval_rows(cfg, prepared), training_types(cfg, prepared)
    plans = [EvalPlan(protocol=EvalProtocol(protocol), train_types=types, progress=True,
                      retrieval_split=cfg.local.eval_retrieval_split or None)
             for protocol in protocols]
    results = await asyncio.gather(
        *(run_eval(ctx, rows, repeats=cfg.local.eval_repeats, plan=plan) for plan in plans))
    stats = models.policy.take_stats()
    return [log.write("eval", models.trainer.step_count,
                      {"phase": phase, "protocol": protocol, "split": splits_of(rows), **metrics,
                       **(stats if index == 0 else {})})
            for index, (protocol, metrics) in enumerate(zip(protocols, results, strict=True))]


async def _train_step(ctx: PipelineContext, models: Models, log: MetricsLog,
                      rows: list[dict[str, Any]],
                      calibration: DistillCalibration | None) -> dict[str, Any]:
    step = models.trainer.step_count + 1
    outcome = await run_training_rollout(ctx, rows, rollout_id=step, progress=True)
    generation = models.policy.take_stats()
    scale: dict[str, float] = {}
    if calibration is not None:
        beta, scale = calibration.measure(outcome.samples)
        models.trainer.set_distill_coef(beta)
    trained = await asyncio.to_thread(models.trainer.step, outcome.samples)
    if trained.skipped:  # the weights are unchanged: the same batch at the same weights
        folder = Path(ctx.cfg.run.output_dir) / "nonfinite" / f"step_{step:05d}"
        try:
            await asyncio.to_thread(capture_skipped_step, models.trainer, outcome.samples, folder)
        except RuntimeError as error:  # out of memory: the run goes on (a failed write ends it)
            logger.warning("step %d: the skipped update's evidence was not saved in %s: %s",
                           step, folder, error)
    models.policy.weights_changed()
    record = {**outcome.metrics, **scale, **group_variance(outcome.metrics), **generation,
              **{f"train/{k}": v for k, v in trained.as_dict().items() if k != "step"}}
    return log.write("train", trained.step, record)


async def train_and_evaluate(cfg: Config, models: Models, log: MetricsLog, result: JobResult,
                             prepared: PreparedData) -> None:
    adapter = make_adapter(cfg, lenient=cfg.local.lenient_actions)
    ctx = await build_context(cfg, models.policy, HFChatTokenizer(models.tokenizer),
                              adapter=adapter, run_dir=result.run_dir, prepared=prepared)
    sources = [row.as_dict() for row in prepared.split(cfg.pipeline.retrieval_split)]
    rng = random.Random(cfg.run.seed)
    calibration = DistillCalibration(cfg.loss) if cfg.pipeline.skill_use == "teacher" else None
    try:
        with timed(result, "eval_before"):
            result.before = await _evaluate(ctx, models, log, prepared, "before")
        with timed(result, "training"):
            for _ in tqdm(range(cfg.local.train_steps), desc="training steps", unit="step"):
                rows = rng.sample(sources, min(cfg.pipeline.source_tasks_per_rollout,
                                               len(sources)))
                result.train.append(await _train_step(ctx, models, log, rows, calibration))
                _maybe_checkpoint(cfg, models, result)
        with timed(result, "eval_after"):
            result.after = await _evaluate(ctx, models, log, prepared, "after")
    finally:
        await models.policy.close()
        await ctx.close()


def _maybe_checkpoint(cfg: Config, models: Models, result: JobResult, final: bool = False) -> None:
    """Save every `local.checkpoint_every` steps and at the end; a step this run saved already
    is never written again (the final stage after a step that `checkpoint_every` divides)."""
    step, every = models.trainer.step_count, cfg.local.checkpoint_every
    folder = result.run_dir / "checkpoints" / f"step_{step:04d}"
    if folder == result.checkpoint or not (final or (every and step % every == 0)):
        return
    result.checkpoint = models.trainer.save(folder, models.tokenizer)
    logger.info("checkpoint %s", result.checkpoint)


def write_run_config(cfg: Config, run_dir: Path) -> Path:
    """Record the validated config the run uses (overrides applied) as `<run>/config.yaml`."""
    path = run_dir / "config.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
    return path


ARCHIVE_PREFIX = "previous"
# The log a launcher (`local.experiments.compare`) writes this run's output to: it archives the
# earlier run itself before opening the log, so the job leaves it in place.
LAUNCHER_LOG = "job.log"


def archive_previous_run(run_dir: Path, keep: tuple[str, ...] = (LAUNCHER_LOG,)) -> Path | None:
    """Move an earlier run's files (everything in `run_dir` but earlier archives and `keep`)
    into a new `<run>/previous-<UTC time>[-n]/`, so a fresh run neither appends to nor
    overwrites them. The folder is created exclusively: an archive is never written into
    twice."""
    present = [path for path in sorted(run_dir.iterdir())
               if not path.name.startswith(ARCHIVE_PREFIX)
               and path.name not in (*keep, LOCK_FILE)]
    if not present:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for attempt in itertools.count():
        archive = run_dir / (f"{ARCHIVE_PREFIX}-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            archive.mkdir()
            break
        except FileExistsError:
            continue
    for path in present:
        path.rename(archive / path.name)
    logger.info("moved the previous run in %s to %s", run_dir, archive)
    return archive


def check_sampling(cfg: Config) -> None:
    """Refuse top-p < 1 for the trained roles (see the module docstring) with a `ConfigError`
    naming the key, which the command line turns into exit 2 and its message."""
    for role in ("solver", "extractor"):
        top_p = getattr(cfg.sampling, role).top_p
        if top_p < 1.0:
            raise ConfigError(
                f"sampling.{role}.top_p",
                f"is {top_p}: the local backend trains on full-distribution log-probs and has no "
                "top-p replay, so it needs top_p 1.0 (only the slime path replays the nucleus); "
                f"set --set sampling.{role}.top_p=1.0")


def run_job(cfg: Config, finish: Callable[[JobResult], None] | None = None) -> JobResult:
    """Run every stage of the module docstring, then `finish` (the summary) while the folder is
    still this job's (`local.run_lock`); returns what was measured."""
    services = env_services(cfg)  # first: an unregistered environment fails before any stage
    check_sampling(cfg)
    preflight(cfg, services)  # before anything is written or moved
    result = JobResult(run_dir=Path(cfg.run.output_dir))
    with hold(result.run_dir):  # a second job on the folder stops here, with nothing moved
        _run_stages(cfg, services, result)
        if finish is not None:
            finish(result)
    return result


def _run_stages(cfg: Config, services: ModuleType, result: JobResult) -> None:
    """Archive, data, retrieval cache, model, servers, training, checkpoint, plot."""
    if not cfg.local.resume_from:
        archive_previous_run(result.run_dir)
    write_run_config(cfg, result.run_dir)
    seed_everything(cfg.run.seed)
    torch.set_num_threads(cfg.local.torch_threads)
    log = MetricsLog.in_run_dir(result.run_dir, open_sinks(result.run_dir, cfg.run.tensorboard))
    with timed(result, "data"):
        services.prepare_data(cfg)
        prepared = PreparedData.read(cfg)  # each file parsed once, passed to every stage
        check_eval_rows(cfg, prepared)
    with timed(result, "retrieval_cache"):
        build_retrieval_cache(cfg, prepared)
    with timed(result, "model"):
        models = load_models(cfg)
    with contextlib.ExitStack() as stack:
        with timed(result, "servers_start"):
            stack.enter_context(servers(cfg))
        stack.callback(log.close)
        asyncio.run(train_and_evaluate(cfg, models, log, result, prepared))
    with timed(result, "checkpoint"):
        _maybe_checkpoint(cfg, models, result, final=True)
    result.plot = plot_run(log.read(), result.run_dir / "rewards.png",
                           reward_subtitle(cfg.rewards, domain_for(cfg).invalid_actions))
