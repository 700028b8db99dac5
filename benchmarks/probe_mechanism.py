"""The mechanism probe (issue 44, docs/design.md §7.5): the hidden probe under each method.

    PYTHONPATH=. .venv/bin/python -m benchmarks.probe_mechanism
        [--config configs/probe_hidden_cpu.yaml] [--methods evolving,grpo_baseline,teacher]
        [--steps 30] [--out runs/probe_mechanism] [--set section.key=value ...] [--tiny]

Runs the main job (`python -m evolving_rl.local`) once per method on the hidden probe, each in
its own folder with its own free ports (`evolving` and `grpo_baseline` are `pipeline.method`;
`teacher` is `evolving` with `pipeline.skill_use: teacher`), then reads what each wrote and
prints, per training step and role: the extractor's reward, the share of its generations that
parsed, the share of cards that state the family's answer (its digit, and no other answer's, in
the skill text the extractor wrote; the answer from `env.probe.tasks`), and the solver's success
without a card (source episodes; every episode of the baseline) and with one (downstream
episodes); then the held-out evaluation before and after training (the `reference` protocol:
a card extracted from another task of the test task's family, with and without it). The full
method works when cards come to state the answer and the solver's success with a card rises
above chance while the baseline's stays there; the first of these numbers that stays at zero is
the link that breaks. `--tiny` (the test suite's smoke run): one method, one step.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.cli import parse_with_tiny
from env.launch import free_port
from env.probe.tasks import task_for
from evolving_rl.config import load_config

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"evolving": ("pipeline.method=evolving",),
           "grpo_baseline": ("pipeline.method=grpo_baseline",),
           "teacher": ("pipeline.method=evolving", "pipeline.skill_use=teacher")}
TINY = {"methods": "evolving", "steps": 1}


def run_method(config: str, method: str, steps: int, out: Path, sets: list[str]) -> Path:
    """One main job of `method` in `out/<method>`; the run folder."""
    folder = out / method
    port = free_port()
    overrides = [*METHODS[method], *sets, f"local.train_steps={steps}",
                 f"probe.port={port}", f"retrieval.port={free_port(exclude=[port])}",
                 f"probe.log_dir={folder / 'logs'}", f"retrieval.log_dir={folder / 'logs'}",
                 f"probe.prepared_dir={folder / 'prepared'}",
                 f"retrieval.cache_path={folder / 'cache.npz'}",
                 f"run.output_dir={folder / 'run'}"]
    command = [sys.executable, "-m", "evolving_rl.local", "--config", config]
    for item in overrides:
        command += ["--set", item]
    logger.info("%s: %s", method, " ".join(command))
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "job.log").open("w") as log:
        subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    return folder / "run"


def states_answer(text: str, answer: int, n_answers: int) -> bool:
    """The text names the answer's digit and no other answer's."""
    return str(answer) in text and not any(str(other) in text
                                           for other in range(1, n_answers + 1)
                                           if other != answer)


def card_shares(run: Path, config: str, sets: list[str]) -> dict[str, tuple[int, int]]:
    """Per rollout: (cards stating the family's answer, extractions)."""
    probe = load_config(config, sets).probe
    shares: dict[str, tuple[int, int]] = {}
    path = run / "skill_library.jsonl"
    for line in path.open() if path.is_file() else ():
        record = json.loads(line)
        task = task_for(probe, record["source_id"])
        right = bool(record["parse_ok"]) and task is not None and states_answer(
            json.dumps(record["skill"]), task.answer, probe.n_answers)
        stated, total = shares.get(record["rollout"], (0, 0))
        shares[record["rollout"]] = (stated + right, total + 1)
    return shares


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def step_rows(run: Path, shares: dict[str, tuple[int, int]]) -> list[str]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    rows = ["| step | extractor reward | parsed | cards stating the answer | solver without card "
            "| solver with card |", "| --- | --- | --- | --- | --- | --- |"]
    for record in (r for r in records if r["kind"] == "train"):
        step = str(record["step"])
        stated, total = shares.get(step, (0, 0))
        baseline = "source/success_rate" not in record
        without = record.get("solver/success_rate") if baseline else record.get(
            "source/success_rate")
        with_card = None if baseline else record.get("solver/success_rate")
        reward = record.get("extractor/reward_mean") if total else None
        rows.append(f"| {step} | {'-' if reward is None else f'{reward:+.2f}'} | "
                    f"{_pct(record.get('extractor/parse_ok_rate') if total else None)} | "
                    f"{stated}/{total} | {_pct(without)} | {_pct(with_card)} |")
    for record in (r for r in records if r["kind"] == "eval"):
        rows.append(f"eval {record['phase']} ({record['protocol']}, {record['eval/cases']:.0f} "
                    f"held-out tasks): without card "
                    f"{_pct(record.get('eval/all/without_skill_success_mean'))}, with card "
                    f"{_pct(record.get('eval/all/with_skill_success_mean'))}, card obtained "
                    f"{_pct(record.get('eval/all/skill_obtained_rate'))}")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/probe_hidden_cpu.yaml")
    parser.add_argument("--methods", default="evolving,grpo_baseline,teacher")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default="runs/probe_mechanism")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    if args.tiny:
        out = out / "tiny"
    for method in args.methods.split(","):
        run = run_method(args.config, method, args.steps, out, args.sets)
        print(f"\n{method} ({args.config}, {args.steps} steps; {run}):")
        print("\n".join(step_rows(run, card_shares(run, args.config, args.sets))))


if __name__ == "__main__":
    main()
