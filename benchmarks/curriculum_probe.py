"""Curriculum probe: how often a uniformly random admissible policy wins the config's train games.

    PYTHONPATH=. .venv/bin/python -m benchmarks.curriculum_probe [--config configs/local_gpu.yaml]
        [--games-per-type 8] [--episodes 8] [--max-steps N] [--seed 0] [--set KEY=VALUE ...]
        [--tiny]

Plays `--episodes` episodes on each of the first `--games-per-type` games of every task type in
the config's prepared train split, in the real TextWorld engine (`env.alfworld.planner.play`),
each command drawn uniformly from the admissible ones, for at most `--max-steps` commands (default
the config's `pipeline.max_steps`). Prints per task type the win rate, the mean number of
admissible commands and the walkthrough length, then the win rate over all games: what a policy
that always answers with an admissible number, with no preference among them, would reach — the
exploration a GRPO group gets for free once the solver's replies are admissible. No model.
Needs the config's prepared ALFWorld data. `--tiny`: one game per type, one episode of 3 steps.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path

from benchmarks.cli import parse_with_tiny
from env.alfworld.planner import play
from evolving_rl.config import load_config
from evolving_rl.retrieval.prepared import split_rows

TINY = {"games_per_type": 1, "episodes": 1, "max_steps": 3}


def _uniform(rng: random.Random, widths: list[int], commands: list[str]) -> str:
    """The random policy: any admissible command, uniformly (counting how many there were)."""
    widths.append(len(commands))
    return rng.choice(commands)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_gpu.yaml")
    parser.add_argument("--games-per-type", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=8, help="episodes per game")
    parser.add_argument("--max-steps", type=int, help="default: pipeline.max_steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (repeatable)")
    args = parse_with_tiny(parser, argv, TINY)
    cfg = load_config(args.config, args.overrides)
    max_steps = args.max_steps or cfg.pipeline.max_steps
    rng = random.Random(args.seed)
    by_type: dict[str, list[dict]] = defaultdict(list)
    for row in split_rows(cfg, "train"):
        by_type[row["metadata"]["task_type"]].append(row)
    wins_all: list[bool] = []
    for task_type, rows in sorted(by_type.items()):
        wins, widths, lengths = [], [], []
        for row in rows[:args.games_per_type]:
            path = str(Path(cfg.alfworld.data_root) / row["metadata"]["game"])
            lengths.append(len(json.loads(Path(path).read_text())["walkthrough"]))

            wins += [play(path, partial(_uniform, rng, widths), max_steps).won
                     for _ in range(args.episodes)]
        wins_all += wins
        print(f"{task_type}: random admissible policy wins {sum(wins)}/{len(wins)} "
              f"({100 * sum(wins) / len(wins):.1f}%) in {max_steps} steps; "
              f"{statistics.fmean(widths):.1f} admissible commands per step; walkthrough "
              f"{statistics.fmean(lengths):.1f} commands")
    print(f"all types: random admissible policy wins {sum(wins_all)}/{len(wins_all)} "
          f"({100 * sum(wins_all) / max(1, len(wins_all)):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
