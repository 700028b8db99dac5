"""The mechanism probe (issue 44, docs/design.md §7.5): the hidden probe under each method.

    PYTHONPATH=. .venv/bin/python -m benchmarks.probe_mechanism
        [--config configs/probe_hidden_cpu.yaml] [--methods evolving,grpo_baseline,teacher]
        [--seeds 0] [--parallel 1] [--steps 30] [--out runs/probe_mechanism]
        [--set section.key=value ...] [--aggregate-only] [--tiny]

Runs the main job (`python -m evolving_rl.local`) once per method and seed (`run.seed`) on the
hidden probe, each in its own folder (`<out>/<method>` for one seed, `<out>/<method>-s<seed>`
for several) with its own free ports, `--parallel` of them at once (`evolving` and
`grpo_baseline` are `pipeline.method`; `teacher` is `evolving` with `pipeline.skill_use:
teacher`), then reads what each wrote and prints, per training step and role: the extractor's
reward, the share of its generations that parsed, the share of cards that state the family's
answer (its digit, and no other answer's, in the skill text the extractor wrote; the answer
from `evolving_rl.domains.probe_tasks`), and the solver's success without a card (source
episodes; every episode of the baseline) and with one (downstream episodes); then the held-out
evaluations before and after training (`local.eval_protocols_*`: the `reference` protocol, a
card extracted from another task of the test task's family, with and without it; the
`written_skill` protocol, the family's hand-written card). Last, per method, the held-out wins
pooled over seeds before and after, with and without a card, with two-sided Fisher tests
(after vs before; each method's after against `grpo_baseline`'s; `core.stats`). The full
method works when cards come to state the answer and the solver's success with a card rises
above chance while the baseline's stays there; the first of these numbers that stays at zero is
the link that breaks. `--aggregate-only` runs nothing and prints the tables of the runs already
in `--out` (e.g. copied back from a GPU machine). `--tiny` (the test suite's smoke run): one
method, one step of 2 source tasks, 4 held-out tasks.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.cli import parse_with_tiny
from env.launch import free_port
from evolving_rl.config import load_config
from evolving_rl.config.schema import ProbeConfig
from evolving_rl.core.stats import Pooled, fisher_or_none, pool
from evolving_rl.domains.probe_tasks import task_for
from evolving_rl.pipeline.eval_records import ARMS
from evolving_rl.pipeline.eval_report import arm_wins

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"evolving": ("pipeline.method=evolving",),
           "grpo_baseline": ("pipeline.method=grpo_baseline",),
           "teacher": ("pipeline.method=evolving", "pipeline.skill_use=teacher")}
TINY = {"methods": "evolving", "steps": 1,
        "sets": ["pipeline.source_tasks_per_rollout=2", "local.n_eval_games=4"]}


def job_command(config: str, method: str, seed: int | None, steps: int, folder: Path,
                sets: list[str]) -> list[str]:
    """The main job of `method` (and `seed`, when given) writing into `folder`."""
    port = free_port()
    seeded = [] if seed is None else [f"run.seed={seed}"]
    overrides = [*METHODS[method], *sets, *seeded, f"local.train_steps={steps}",
                 f"probe.port={port}", f"retrieval.port={free_port(exclude=[port])}",
                 f"probe.log_dir={folder / 'logs'}", f"retrieval.log_dir={folder / 'logs'}",
                 f"probe.prepared_dir={folder / 'prepared'}",
                 f"retrieval.cache_path={folder / 'cache.npz'}",
                 f"run.output_dir={folder / 'run'}"]
    command = [sys.executable, "-m", "evolving_rl.local", "--config", config]
    for item in overrides:
        command += ["--set", item]
    return command


def run_name(method: str, seed: int | None) -> str:
    return method if seed is None else f"{method}-s{seed}"


def run_jobs(config: str, jobs: list[tuple[str, int | None]], steps: int, out: Path,
             sets: list[str], parallel: int) -> dict[tuple[str, int | None], Path]:
    """Every (method, seed) job, `parallel` at a time; their run folders. Ports are taken
    when a job starts, so two running jobs never share one."""
    runs: dict[tuple[str, int | None], Path] = {}
    pending = list(jobs)
    running: list[tuple[subprocess.Popen[bytes], str]] = []
    while pending or running:
        while pending and len(running) < parallel:
            method, seed = pending.pop(0)
            folder = out / run_name(method, seed)
            folder.mkdir(parents=True, exist_ok=True)
            command = job_command(config, method, seed, steps, folder, sets)
            logger.info("%s: %s", folder.name, " ".join(command))
            with (folder / "job.log").open("w") as log:
                running.append((subprocess.Popen(command, cwd=ROOT, stdout=log,
                                                 stderr=subprocess.STDOUT), folder.name))
            runs[(method, seed)] = folder / "run"
        process, name = running.pop(0)
        if process.wait() != 0:
            raise RuntimeError(f"{name} failed (exit {process.returncode}); see its job.log")
    return runs


def states_answer(text: str, answer: int, n_answers: int) -> bool:
    """The text names the answer's digit and no other answer's."""
    return str(answer) in text and not any(str(other) in text
                                           for other in range(1, n_answers + 1)
                                           if other != answer)


def quotes_answer(text: str, answer: int) -> bool:
    """The text says "winning answer is <answer>" (the feedback's words), whatever other digits
    it holds (cards often copy the observation's answer list as well)."""
    return f"winning answer is {answer}" in text


@dataclass
class CardCounts:
    """One rollout's extractions: all, parsed, stating the family's answer, quoting it."""

    total: int = 0
    parsed: int = 0
    stated: int = 0
    quoted: int = 0


def card_counts(run: Path, probe: ProbeConfig) -> dict[str, CardCounts]:
    """Per rollout, the run's extractions counted (`CardCounts`)."""
    counts: dict[str, CardCounts] = {}
    path = run / "skill_library.jsonl"
    for line in path.open() if path.is_file() else ():
        record = json.loads(line)
        count = counts.setdefault(str(record["rollout"]), CardCounts())
        count.total += 1
        task = task_for(probe, record["source_id"])
        if not record["parse_ok"] or task is None:
            continue
        text = json.dumps(record["skill"])
        count.parsed += 1
        count.stated += states_answer(text, task.answer, probe.n_answers)
        count.quoted += quotes_answer(text, task.answer)
    return counts


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def step_rows(run: Path, counts: dict[str, CardCounts]) -> list[str]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    rows = ["| step | extractor reward | parsed | cards stating the answer | cards quoting it "
            "| solver without card | solver with card |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for record in (r for r in records if r["kind"] == "train"):
        step = str(record["step"])
        cards = counts.get(step, CardCounts())
        stated, quoted, total = cards.stated, cards.quoted, cards.total
        baseline = "source/success_rate" not in record
        without = record.get("solver/success_rate") if baseline else record.get(
            "source/success_rate")
        with_card = None if baseline else record.get("solver/success_rate")
        reward = record.get("extractor/reward_mean") if total else None
        rows.append(f"| {step} | {'-' if reward is None else f'{reward:+.2f}'} | "
                    f"{_pct(record.get('extractor/parse_ok_rate') if total else None)} | "
                    f"{stated}/{total} | {quoted}/{total} | {_pct(without)} | {_pct(with_card)} |")
    for record in (r for r in records if r["kind"] == "eval"):
        rows.append(f"eval {record['phase']} ({record['protocol']}, {record['eval/cases']:.0f} "
                    f"held-out tasks): without card "
                    f"{_pct(record.get('eval/all/without_skill_success_mean'))}, with card "
                    f"{_pct(record.get('eval/all/with_skill_success_mean'))}, card obtained "
                    f"{_pct(record.get('eval/all/skill_obtained_rate'))}")
    return rows


def held_out(run: Path) -> dict[tuple[str, str, str], Pooled]:
    """(phase, protocol, arm) -> held-out wins of the run's evaluations."""
    out = {}
    for line in (run / "metrics.jsonl").open():
        record = json.loads(line)
        if record["kind"] != "eval":
            continue
        for arm in ARMS:
            pooled = arm_wins(record, "all", arm)
            if pooled is not None and pooled.episodes:
                out[(record["phase"], record["protocol"], arm)] = pooled
    return out


def _cell(pooled: Pooled | None) -> str:
    return "-" if pooled is None else f"{pooled.wins}/{pooled.episodes} ({100 * pooled.rate:.0f}%)"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def pooled_rows(runs: dict[tuple[str, int | None], Path]) -> list[str]:
    """Per method, protocol and arm: held-out wins pooled over seeds, before and after, and the
    Fisher tests (after vs before; after vs grpo_baseline's after)."""
    counts = {key: held_out(run) for key, run in runs.items()}
    methods = list(dict.fromkeys(method for method, _ in runs))
    cells = sorted({(protocol, arm) for found in counts.values() for _, protocol, arm in found})

    def pooled(method: str, phase: str, protocol: str, arm: str) -> Pooled | None:
        return pool(found.get((phase, protocol, arm)) for (m, _), found in counts.items()
                    if m == method)

    rows = ["| method | seeds | protocol | arm | before | after | p (after vs before) "
            "| p (vs grpo_baseline after) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for method in methods:
        seeds = ",".join(str(seed) for m, seed in runs if m == method and seed is not None)
        for protocol, arm in cells:
            before = pooled(method, "before", protocol, arm)
            after = pooled(method, "after", protocol, arm)
            versus = None if method == "grpo_baseline" else fisher_or_none(
                after, pooled("grpo_baseline", "after", protocol, arm))
            rows.append(f"| {method} | {seeds or '-'} | {protocol} | {arm} | {_cell(before)} | "
                        f"{_cell(after)} | {_p(fisher_or_none(after, before))} | {_p(versus)} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/probe_hidden_cpu.yaml")
    parser.add_argument("--methods", default="evolving,grpo_baseline,teacher")
    parser.add_argument("--seeds", default="", help="comma-separated run.seed values "
                        "(default: the config's seed)")
    parser.add_argument("--parallel", type=int, default=1, help="jobs at once")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default="runs/probe_mechanism")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--aggregate-only", action="store_true",
                        help="print the tables of the runs already in --out")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    if args.tiny:
        out = out / "tiny"
    seeds: list[int | None] = [int(s) for s in args.seeds.split(",") if s] or [None]
    jobs = [(method, seed) for method in args.methods.split(",") for seed in seeds]
    if args.aggregate_only:
        runs = {job: run for job in jobs
                if (run := out / run_name(*job) / "run").joinpath("metrics.jsonl").is_file()}
    else:
        runs = run_jobs(args.config, jobs, args.steps, out, args.sets, max(1, args.parallel))
    probe = load_config(args.config, args.sets).probe
    for (method, seed), run in runs.items():
        label = method if seed is None else f"{method}, seed {seed}"
        print(f"\n{label} ({args.config}, {args.steps} steps; {run}):")
        print("\n".join(step_rows(run, card_counts(run, probe))))
    print("\nHeld-out wins pooled over seeds:\n")
    print("\n".join(pooled_rows(runs)))


if __name__ == "__main__":
    main()
