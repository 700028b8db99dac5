"""Offline generator of ALFWorld games in the official on-disk layout, each proven solvable.

Owns the orchestration: one job per (split, task type, index), each with its own seed derived from
the global seed, so the output does not depend on the number of workers or their order. A job
samples a task and a room (`gen_task`), renders both files (`gen_pddl`), asks Fast Downward for a
walkthrough and replays it in the real TextWorld engine (`planner`); a game that has no plan, a
plan longer than the limit, or a replay that does not end won is discarded, counted, and the job
retries with the next attempt seed. Proven games are written to a scratch folder outside
`json_2.1.1/` and renamed into `json_2.1.1/<split>/<task>-<obj>-<mrecep>-<recep>-<scene>/<trial>/`
of a staging root (`.generating/`), whose `json_2.1.1/` is moved into the data root only when
every job has finished: a generation killed midway leaves no game in the data root (the next
run starts it over), never a half-made set.

Jobs run in a `spawn` pool with PYTHONHASHSEED fixed, so the same seed gives byte-identical files.

    python -m env.alfworld.generate --out data/alfworld_generated --per-type 5 --seed 0 --workers 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import random
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

from tqdm import tqdm

from env.alfworld.gen_pddl import GameFiles, game_files, load_logic
from env.alfworld.gen_task import RoomLimits, build_room, sample_task
from env.alfworld.planner import plan_walkthrough, replay
from env.alfworld.prepare import TASK_TYPES
from evolving_rl.config import load_config

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid_seen", "valid_unseen")
DATA_DIR = "json_2.1.1"
SCRATCH_DIR = ".generate_tmp"
STAGING_DIR = ".generating"  # the whole set until every job is done (`generate_dataset`)
REPORT_FILE = "generation_report.json"


@dataclass(frozen=True)
class GeneratorSettings:
    """Everything that shapes the games besides their count."""

    seed: int = 0
    limits: RoomLimits = field(default_factory=RoomLimits)
    max_attempts: int = 5
    max_walkthrough: int = 40


@dataclass(frozen=True)
class Attempt:
    """One try at a game: discard reason (None if kept), walkthrough length, seconds."""

    reason: str | None
    length: int
    seconds: float


@dataclass(frozen=True)
class JobResult:
    split: str
    task_type: str
    game_path: str | None
    attempts: tuple[Attempt, ...]


@dataclass
class TypeStats:
    """Generator statistics of one task type over all splits (seconds include discarded tries)."""

    attempted: int = 0
    succeeded: int = 0
    discarded: dict[str, int] = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        lengths = self.lengths or [0]
        return {"attempted": self.attempted, "succeeded": self.succeeded,
                "discarded": dict(sorted(self.discarded.items())),
                "walkthrough_min": min(lengths), "walkthrough_mean": statistics.fmean(lengths),
                "walkthrough_max": max(lengths),
                "seconds_per_game": sum(self.seconds) / max(self.succeeded, 1)}


@dataclass
class GenerationReport:
    """What a generation run produced: per task type stats and games per split."""

    by_type: dict[str, TypeStats] = field(default_factory=dict)
    games_per_split: dict[str, int] = field(default_factory=dict)
    missing: int = 0
    wall_seconds: float = 0.0

    def add(self, result: JobResult) -> None:
        stats = self.by_type.setdefault(result.task_type, TypeStats())
        for attempt in result.attempts:
            stats.attempted += 1
            stats.seconds.append(attempt.seconds)
            if attempt.reason is None:
                stats.succeeded += 1
                stats.lengths.append(attempt.length)
            else:
                stats.discarded[attempt.reason] = stats.discarded.get(attempt.reason, 0) + 1
        if result.game_path is None:
            self.missing += 1
        else:
            self.games_per_split[result.split] = self.games_per_split.get(result.split, 0) + 1

    def to_dict(self) -> dict:
        return {"by_type": {t: s.summary() for t, s in sorted(self.by_type.items())},
                "games_per_split": dict(sorted(self.games_per_split.items())),
                "missing": self.missing, "wall_seconds": round(self.wall_seconds, 1)}


def job_seed(seed: int, split: str, task_type: str, index: int, attempt: int) -> int:
    digest = hashlib.sha256(f"{seed}/{split}/{task_type}/{index}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def write_json_atomic(path: Path, data: object, indent: int | None = None) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=indent), encoding="utf-8")
    os.replace(tmp, path)


def _sample(seed: int, split: str, task_type: str, limits: RoomLimits) -> GameFiles:
    rng = random.Random(seed)
    spec = sample_task(rng, task_type, split)
    room = build_room(rng, spec, limits)
    return game_files(rng, spec, room, seed, load_logic())


def _prove(files: GameFiles, scratch: Path, settings: GeneratorSettings) -> tuple[str | None, int]:
    """Plan, write to `scratch`, replay from disk; the discard reason or None, and the length."""
    walkthrough = plan_walkthrough(files.game)
    if not walkthrough:
        return "no_plan", 0
    if len(walkthrough) > settings.max_walkthrough:
        return "walkthrough_too_long", len(walkthrough)
    scratch.mkdir(parents=True)
    game = dict(files.game, solvable=True, walkthrough=walkthrough)
    (scratch / "game.tw-pddl").write_text(json.dumps(game), encoding="utf-8")
    (scratch / "traj_data.json").write_text(json.dumps(files.traj_data, indent=2),
                                            encoding="utf-8")
    result = replay(str(scratch / "game.tw-pddl"), walkthrough)
    if result.rejected is not None:
        return "replay_inadmissible_step", len(walkthrough)
    if not result.won:
        return "replay_not_won", len(walkthrough)
    return None, len(walkthrough)


def run_job(job: tuple[str, str, int], out_root: Path, settings: GeneratorSettings) -> JobResult:
    """Make one game of (split, task type, index), trying up to `max_attempts` seeds."""
    split, task_type, index = job
    attempts = []
    for attempt in range(settings.max_attempts):
        start = time.perf_counter()
        seed = job_seed(settings.seed, split, task_type, index, attempt)
        try:
            files = _sample(seed, split, task_type, settings.limits)
        except (ValueError, IndexError) as err:
            logger.debug("sampling failed for %s: %s", job, err)
            attempts.append(Attempt("sampling_failed", 0, time.perf_counter() - start))
            continue
        scratch = out_root / SCRATCH_DIR / files.trial
        shutil.rmtree(scratch, ignore_errors=True)
        reason, length = _prove(files, scratch, settings)
        final = out_root / DATA_DIR / split / files.folder / files.trial
        if reason is None:
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(final, ignore_errors=True)
            os.rename(scratch, final)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        attempts.append(Attempt(reason, length, time.perf_counter() - start))
        if reason is None:
            return JobResult(split, task_type, str(final), tuple(attempts))
    return JobResult(split, task_type, None, tuple(attempts))


def plan_jobs(per_type: int | dict[str, int],
              task_types: tuple[str, ...] = TASK_TYPES) -> list[tuple[str, str, int]]:
    counts = per_type if isinstance(per_type, dict) else {s: per_type for s in SPLITS}
    unknown = set(counts) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown splits {sorted(unknown)}; expected {SPLITS}")
    return [(split, task_type, index) for split in SPLITS for task_type in task_types
            for index in range(counts.get(split, 0))]


def _spawn_pool(workers: int):
    """A spawn pool whose children hash strings identically (planner output is then stable)."""
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        return multiprocessing.get_context("spawn").Pool(workers)
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = saved


def _publish(staging: Path, out_root: Path) -> None:
    """Move the finished `staging/json_2.1.1/` into `out_root`: in one rename when `out_root`
    holds no game yet (an empty or half-deleted `json_2.1.1/` is replaced), else game by game
    into the existing set (the command line adding to a data root)."""
    target = out_root / DATA_DIR
    if target.is_dir() and not any(target.glob("*/*/*/game.tw-pddl")):
        shutil.rmtree(target)
    if not target.exists():
        os.rename(staging / DATA_DIR, target)
        return
    for game_file in sorted((staging / DATA_DIR).glob("*/*/*/game.tw-pddl")):
        game = game_file.parent
        final = target / game.relative_to(staging / DATA_DIR)
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(game, final)


def generate_dataset(out_root: str | Path, per_type: int | dict[str, int], seed: int = 0,
                     workers: int = 1, settings: GeneratorSettings | None = None,
                     task_types: tuple[str, ...] = TASK_TYPES) -> GenerationReport:
    """Generate games under `out_root/json_2.1.1/`; `per_type` is per split (int: every split).
    All or nothing: the games go to `out_root/.generating/` (a killed run's is started over)
    and are moved into place only when every job has finished (`_publish`)."""
    settings = replace(settings or GeneratorSettings(), seed=seed)
    out_root = Path(out_root)
    staging = out_root / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    (staging / DATA_DIR).mkdir(parents=True)
    jobs = plan_jobs(per_type, task_types)
    report = GenerationReport()
    start = time.perf_counter()
    work = partial(run_job, out_root=staging, settings=settings)
    with _spawn_pool(max(1, workers)) as pool:
        for result in tqdm(pool.imap_unordered(work, jobs), total=len(jobs), desc="games",
                           unit="game"):
            report.add(result)
    _publish(staging, out_root)
    shutil.rmtree(staging)
    report.wall_seconds = time.perf_counter() - start
    summary = dict(report.to_dict(), seed=seed, settings=asdict(settings))
    write_json_atomic(out_root / REPORT_FILE, summary, indent=2)
    return report


def _parse_per_type(text: str) -> int | dict[str, int]:
    if "=" not in text:
        return int(text)
    pairs = (part.split("=", 1) for part in text.split(","))
    return {split.strip(): int(count) for split, count in pairs}


def _settings_from_args(
        args: argparse.Namespace) -> tuple[Path, GeneratorSettings, tuple[str, ...]]:
    """Output root, settings and task types: explicit flags, else the config's alfworld section."""
    limits, types = RoomLimits(), TASK_TYPES
    out = args.out
    if args.config:
        cfg = load_config(args.config).alfworld
        limits = RoomLimits(cfg.generator_max_receptacles, cfg.generator_max_objects)
        types = cfg.generator_task_types or TASK_TYPES
        out = out or cfg.data_root
    if out is None:
        raise SystemExit("error: give --out or --config")
    limits = RoomLimits(args.max_receptacles or limits.max_receptacles,
                        args.max_objects or limits.max_objects)
    if args.types:
        types = tuple(args.types.split(","))
        unknown = sorted(set(types) - set(TASK_TYPES))
        if unknown:
            raise SystemExit(f"error: unknown task types {unknown}; expected some of {TASK_TYPES}")
    return Path(out), GeneratorSettings(args.seed, limits, args.max_attempts,
                                        args.max_walkthrough), types


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", help="ALFWORLD_DATA root to write json_2.1.1/ in "
                                      "(default: alfworld.data_root of --config)")
    parser.add_argument("--config", help="YAML config: data_root and generator_* limits")
    parser.add_argument("--per-type", default="5", type=_parse_per_type,
                        help="games per task type per split: N, or train=N,valid_seen=M,...")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-receptacles", type=int,
                        help=f"difficulty: receptacle instances per room, the task's own always "
                             f"kept (default {RoomLimits.max_receptacles})")
    parser.add_argument("--max-objects", type=int,
                        help=f"difficulty: objects per room, targets included "
                             f"(default {RoomLimits.max_objects})")
    parser.add_argument("--types", help="comma-separated task types (default: the config's "
                                        "alfworld.generator_task_types, else all six)")
    parser.add_argument("--max-attempts", type=int, default=GeneratorSettings.max_attempts)
    parser.add_argument("--max-walkthrough", type=int, default=GeneratorSettings.max_walkthrough)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    out, settings, types = _settings_from_args(args)
    report = generate_dataset(out, args.per_type, args.seed, args.workers, settings, types)
    for task_type, stats in sorted(report.by_type.items()):
        logger.info("%s: %s", task_type, json.dumps(stats.summary()))
    logger.info("games per split: %s; missing: %d; %.1f s", report.games_per_split,
                report.missing, report.wall_seconds)
    if report.missing:
        raise SystemExit(f"{report.missing} games could not be generated; see {REPORT_FILE}")


if __name__ == "__main__":
    main()
