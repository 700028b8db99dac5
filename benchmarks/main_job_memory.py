"""Main-job memory benchmark: peak resident memory of the real main job's whole process tree.

    .venv/bin/python -m benchmarks.main_job_memory [--config configs/local_cpu.yaml]
        [--train-steps 1] [--eval-games 1] [--full] [--tiny] [--set KEY=VALUE ...]

Runs `python -m evolving_rl.local` (what `scripts/run_local.sh` runs) twice as a subprocess, on a
short schedule of the config (`--train-steps` GRPO steps, `--eval-games` held-out games before and
after; `--full`: the config's own schedule) in a temporary run folder with free ports:
- baseline: the trainer as it was — no activation checkpointing, the output layer over every
  trained token of a micro-batch at once, freed heap pages kept by glibc;
- config: the config's trainer memory settings (`local.gradient_checkpointing`,
  `local.logit_chunk_tokens`, `local.release_freed_memory`).
A sampler thread adds up the resident set of the job and all its descendants (environment and
retrieval servers) every 0.2 s; each run prints `main job peak RSS: X.XX GB`, the largest process,
the wall time and the training step's duration, then the ratio config / baseline. Target: a peak
under 6 GB (exit status 1 when missed, except in `--tiny`). One run per setting: memory barely
varies between runs; the wall times are single runs on a shared machine, not timing claims.
`--tiny` (the test suite's smoke run): one source task of one-step episodes with short replies,
one evaluation game; the same code path, too small for the target.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.cli import parse_with_tiny

TARGET_GB = 6.0
BASELINE = ("local.gradient_checkpointing=false", "local.logit_chunk_tokens=0",
            "local.release_freed_memory=false")
TINY = {"train_steps": 1, "eval_games": 1,
        "overrides": ["pipeline.source_tasks_per_rollout=1", "pipeline.max_steps=1",
                      "sampling.solver.max_new_tokens=8", "sampling.extractor.max_new_tokens=16",
                      "sampling.eval_solver.max_new_tokens=8",
                      "sampling.eval_extractor.max_new_tokens=16"]}
SAMPLE_S = 0.2

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobMemory:
    """What one main-job run measured."""

    name: str
    peak_gb: float
    largest_gb: float
    largest: str
    wall_s: float
    train_s: float


class TreeSampler:
    """Peak of the summed RSS of a process and its descendants, sampled on a thread."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.peak = 0
        self.per_process: dict[int, tuple[int, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        total = 0
        for proc in [self.root, *self.root.children(recursive=True)]:
            try:
                rss, name = proc.memory_info().rss, " ".join(proc.cmdline()[1:4])
            except psutil.Error:  # exited between the listing and the read
                continue
            total += rss
            if rss > self.per_process.get(proc.pid, (0, ""))[0]:
                self.per_process[proc.pid] = (rss, name)
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except psutil.Error:  # the job itself has exited
                return
            self._stop.wait(SAMPLE_S)

    def stop(self) -> tuple[int, str]:
        """Stop sampling; the largest single process's peak RSS and its command."""
        self._stop.set()
        self._thread.join()
        return max(self.per_process.values(), default=(0, ""))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def job_command(args: argparse.Namespace, run_dir: Path, extra: tuple[str, ...]) -> list[str]:
    sets = [f"run.output_dir={run_dir}", f"retrieval.cache_path={run_dir}/retrieval.npz",
            f"alfworld.port={free_port()}", f"alfworld.worker_base_port={free_port()}",
            f"retrieval.port={free_port()}", *args.overrides, *extra]
    if not args.full:
        sets += [f"local.train_steps={args.train_steps}", f"local.n_eval_games={args.eval_games}"]
    command = [sys.executable, "-m", "evolving_rl.local", "--config", args.config]
    for item in sets:
        command += ["--set", item]
    return command


def train_seconds(run_dir: Path) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return sum(r.get("train/duration_s", 0.0) for r in records if r.get("kind") == "train")


def run_job(name: str, args: argparse.Namespace, extra: tuple[str, ...]) -> JobMemory:
    with tempfile.TemporaryDirectory(prefix=f"main_job_{name}_") as tmp:
        run_dir, log_path = Path(tmp) / "run", Path(tmp) / "job.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        started = time.perf_counter()
        with log_path.open("w") as log:
            job = subprocess.Popen(job_command(args, run_dir, extra), stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
            sampler = TreeSampler(job.pid)
            code = job.wait()
        largest_rss, largest = sampler.stop()
        wall = time.perf_counter() - started
        if code != 0:
            raise RuntimeError(f"{name} main job exited {code}:\n{log_path.read_text()[-3000:]}")
        return JobMemory(name, sampler.peak / 1e9, largest_rss / 1e9, largest, wall,
                         train_seconds(run_dir))


def report(result: JobMemory) -> None:
    print(f"{result.name:8s} main job peak RSS: {result.peak_gb:.2f} GB (process tree; largest "
          f"process {result.largest_gb:.2f} GB: {result.largest}); wall {result.wall_s:.0f}s, "
          f"training steps {result.train_s:.0f}s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--train-steps", type=int, default=1)
    parser.add_argument("--eval-games", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="the config's own schedule")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="a config override for both runs")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    schedule = "the config's schedule" if args.full else (
        f"{args.train_steps} training step(s), {args.eval_games} eval game(s)")
    print(f"main job {args.config}, {schedule}; one run per setting")
    results = []
    for name, extra in (("baseline", BASELINE), ("config", ())):
        logger.info("running the %s main job ...", name)
        results.append(run_job(name, args, extra))
        report(results[-1])
    baseline, config = results
    met = config.peak_gb < TARGET_GB
    print(f"peak RSS config / baseline: {config.peak_gb / baseline.peak_gb:.2f}x; training time "
          f"config / baseline: {config.train_s / max(baseline.train_s, 1e-9):.2f}x; "
          f"{'PASS' if met else 'MISS'} peak < {TARGET_GB:.0f} GB")
    return 0 if met or args.tiny else 1


if __name__ == "__main__":
    sys.exit(main())
