"""Solver probe: how often the local policy's ALFWorld replies are admissible, per action format.

    PYTHONPATH=. .venv/bin/python -m benchmarks.solver_probe [--games-per-type 4] [--episodes 4]
        [--config configs/local_cpu.yaml] [--formats verbatim,number] [--set section.key=value ...]
        [--tiny]

Plays `--episodes` sampled solver episodes (the config's solver sampling, no skill) on the first
`--games-per-type` train games of each `--types` task type, through the real ALFWorld router and
workers started here and the in-process policy, once with `alfworld.action_format: verbatim` (the
reference prompt) and once with `number`, both with lenient parsing. Prints, per format, the share
of admissible replies, the win rate and how many per-game groups had varied outcomes, then the
ratio of admissible shares (number / verbatim) — the measurement behind the CPU default's choice.
Needs the config's prepared ALFWorld data (`bash scripts/run_local.sh` makes it). `--tiny` (the
test suite's smoke run): one game per type, one episode each, of at most 2 steps of at most 16
new tokens; the same code path.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
import tempfile
from collections import Counter, defaultdict

import torch

from benchmarks.cli import parse_with_tiny
from env.alfworld import launch
from env.launch import free_port, free_port_block, job_serving
from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config import Config, load_config
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import load_model, load_tokenizer, resolve_model_path
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.pipeline.episode import run_episode
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.retrieval.prepared import split_rows

FORMATS = ("verbatim", "number")
TINY = {"games_per_type": 1, "episodes": 1}
TINY_OVERRIDES = ["pipeline.max_steps=2", "sampling.solver.max_new_tokens=16"]


def probe_rows(cfg: Config, types: list[str], per_type: int) -> list[dict]:
    train = split_rows(cfg, "train")
    return [row for t in types
            for row in [r for r in train if r["metadata"]["task_type"] == t][:per_type]]


async def play(cfg: Config, model, tokenizer, rows: list[dict], episodes: int) -> dict:
    """Every row `episodes` times under `cfg`; admissible share, win rate, varied groups."""
    policy = LocalPolicy(model, tokenizer, cfg.local, seed=cfg.run.seed)
    ctx = await build_context(cfg, policy, HFChatTokenizer(tokenizer),
                              adapter=make_adapter(cfg, lenient=True))
    sampling = ctx.sampling(cfg.sampling.solver, solver=True)
    limit = asyncio.Semaphore(cfg.pipeline.max_concurrent_episodes)

    async def one(row: dict):
        async with limit:
            return await run_episode(ctx, IOClock(), ctx.adapter.task_from_row(row), None,
                                     sampling)

    try:
        results = await asyncio.gather(*(one(r) for r in rows for _ in range(episodes)))
    finally:
        await policy.close()
        await ctx.close()
    statuses: Counter[str] = Counter()
    wins: dict[str, list[bool]] = defaultdict(list)
    for result in results:
        statuses.update(result.action_statuses)
        wins[result.task.id].append(result.success)
    return {"admissible": statuses.get("ok", 0) / max(1, sum(statuses.values())),
            "replies": sum(statuses.values()), "episodes": len(results),
            "wins": sum(sum(w) for w in wins.values()),
            "varied": sum(1 for w in wins.values() if 0 < sum(w) < len(w)), "groups": len(wins)}


def run_overrides(logs: str) -> list[str]:
    """Free loopback ports for the servers and every output under `logs`."""
    router = free_port_block(3)
    return [f"alfworld.port={router}", f"alfworld.worker_base_port={router + 1}",
            f"retrieval.port={free_port(exclude=range(router, router + 3))}",
            f"alfworld.log_dir={logs}", f"run.output_dir={logs}"]


def probe(args: argparse.Namespace, cfg: Config) -> int:
    """Start the ALFWorld servers, play both formats, stop the servers; print the shares."""
    torch.set_num_threads(cfg.local.torch_threads)
    rows = probe_rows(cfg, args.types.split(","), args.games_per_type)
    path = resolve_model_path(cfg.local.model, cfg.local.models_dir)
    tokenizer = load_tokenizer(path)
    model = load_model(path, cfg.local.device, cfg.local.dtype, trainable=False)
    measured = {}
    with job_serving(cfg, launch.start, launch.stop):
        for action_format in args.formats.split(","):
            variant = dataclasses.replace(cfg, alfworld=dataclasses.replace(
                cfg.alfworld, action_format=action_format))
            measured[action_format] = out = asyncio.run(
                play(variant, model, tokenizer, rows, args.episodes))
            print(f"{action_format:9s}: admissible replies {out['admissible']:.2f} of "
                  f"{out['replies']}, wins {out['wins']}/{out['episodes']}, games with varied "
                  f"outcomes {out['varied']}/{out['groups']}")
    if set(measured) == set(FORMATS):
        base = measured["verbatim"]["admissible"]
        ratio = measured["number"]["admissible"] / base if base else float("inf")
        print(f"admissible share, number / verbatim: {ratio:.1f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--types", default="look_at_obj_in_light,pick_and_place_simple")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help="action formats to play (the ratio needs both)")
    parser.add_argument("--games-per-type", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per game")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (repeatable)")
    args = parse_with_tiny(parser, argv, TINY)
    if not set(args.formats.split(",")) <= set(FORMATS):
        parser.error(f"--formats takes some of {','.join(FORMATS)}")
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="solver_probe_") as logs:
        overrides = [*(TINY_OVERRIDES if args.tiny else []), *args.overrides]
        return probe(args, load_config(args.config, [*overrides, *run_overrides(logs)]))


if __name__ == "__main__":
    sys.exit(main())
