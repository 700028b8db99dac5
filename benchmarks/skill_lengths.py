"""Skill lengths: how many tokens a complete skill takes, to set the extraction cap from data.

    PYTHONPATH=. .venv/bin/python -m benchmarks.skill_lengths --config configs/local_gpu_qwen.yaml
        [--games 16] [--skills 4] [--cap 1024] [--out lengths.json] [--set section.key=value ...]
        [--tiny]

Plays one sampled source episode (the profile's training solver sampling, no skill) on each of
the first `--games` train games (round robin over task types), through the real ALFWorld router
and workers started here and the in-process policy, then samples `--skills` extractions of each
trajectory with the profile's training extractor sampling, skill format, reply prefix and model,
but a generous cap of `--cap` new tokens. Prints the token-length distribution of the complete
extractions (finished by the end-of-turn token, not the cap), the parse rate, and the share of
all extractions that the profile's own cap (`sampling.extractor.max_new_tokens`) would truncate
against the share a cap at the complete lengths' p95 (rounded up to 32 tokens) would: the
measurement behind a profile's cap (issue target: <= 10% truncated). Needs the config's prepared
ALFWorld data (`bash scripts/run_local.sh` makes it). `--tiny` (the test suite's smoke run): two
games, two skills each, of at most 48 tokens, after episodes of at most 2 steps.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

from benchmarks.cli import parse_with_tiny
from benchmarks.solver_probe import run_overrides
from env.alfworld import launch
from env.launch import job_serving
from evolving_rl.clients.policy import FinishReason
from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config import Config, load_config
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import load_model, load_tokenizer, resolve_model_path
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.pipeline.episode import run_episode
from evolving_rl.pipeline.extraction import Extraction, extract_skills
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.retrieval.prepared import environment_prepared_dir, read_split, round_robin

TINY = {"games": 2, "skills": 2, "cap": 48}
TINY_OVERRIDES = ["pipeline.max_steps=2", "sampling.solver.max_new_tokens=8"]
ROUND_TO = 32


async def extract_all(cfg: Config, model, tokenizer, rows: list[dict], skills: int,
                      cap: int) -> tuple[list[Extraction], int]:
    """One source episode per row, `skills` extractions of each at `cap`; (extractions, wins)."""
    policy = LocalPolicy(model, tokenizer, cfg.local, seed=cfg.run.seed)
    ctx = await build_context(cfg, policy, HFChatTokenizer(tokenizer),
                              adapter=make_adapter(cfg, lenient=cfg.local.lenient_actions))
    solver = ctx.sampling(cfg.sampling.solver, solver=True)
    extractor = dataclasses.replace(ctx.sampling(cfg.sampling.extractor, solver=False),
                                    max_new_tokens=cap)

    bar = tqdm(total=len(rows), desc="source episode + extractions", unit="game")

    async def one(row: dict) -> tuple[list[Extraction], bool]:
        task = ctx.adapter.task_from_row(row)
        clock = IOClock()
        source = await run_episode(ctx, clock, task, None, solver)
        found = [] if source.trace is None else await extract_skills(
            ctx, clock, task, source.trace.turns, source.success, skills, extractor)
        bar.update(1)
        return found, source.success

    try:
        results = await asyncio.gather(*(one(row) for row in rows))
    finally:
        bar.close()
        await policy.close()
        await ctx.close()
    return [e for found, _ in results for e in found], sum(won for _, won in results)


def percentile(values: list[int], q: float) -> int:
    """The nearest-rank q-th percentile (q in 0..100) of `values` (non-empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summarize(extractions: list[Extraction], cap: int, profile_cap: int) -> dict:
    """Length distribution of complete extractions and the truncated shares of two caps."""
    lengths = [len(e.generation.token_ids) for e in extractions if e.generation is not None]
    complete = [len(e.generation.token_ids) for e in extractions if e.generation is not None
                and e.generation.finish_reason is not FinishReason.LENGTH]
    out: dict = {"extractions": len(lengths), "complete": len(complete), "generous_cap": cap,
                 "lengths": sorted(lengths),
                 "parsed": sum(1 for e in extractions if e.card is not None),
                 "usable": sum(1 for e in extractions if e.usable), "profile_cap": profile_cap}
    if not complete:
        return out
    p95 = percentile(complete, 95)
    suggested = ROUND_TO * math.ceil(p95 / ROUND_TO)
    out.update(p50=percentile(complete, 50), p90=percentile(complete, 90), p95=p95,
               max=max(complete), mean=statistics.fmean(complete), suggested_cap=suggested,
               truncated_at_profile_cap=sum(n >= profile_cap for n in lengths) / len(lengths),
               truncated_at_suggested_cap=sum(n >= suggested for n in lengths) / len(lengths),
               truncated_at_generous_cap=1 - len(complete) / len(lengths))
    return out


def report(out: dict, wins: int, games: int) -> None:
    print(f"source episodes won {wins}/{games}; extractions {out['extractions']}, complete "
          f"{out['complete']} (generous cap {out['generous_cap']}), parsed {out['parsed']}, "
          f"usable {out['usable']}")
    if "p95" not in out:
        print("no complete extraction: raise --cap")
        return
    print(f"complete skill tokens: p50 {out['p50']}, p90 {out['p90']}, p95 {out['p95']}, "
          f"max {out['max']}, mean {out['mean']:.1f}")
    print(f"truncated share: profile cap {out['profile_cap']} -> "
          f"{100 * out['truncated_at_profile_cap']:.1f}%, suggested cap {out['suggested_cap']} "
          f"(p95 rounded up to {ROUND_TO}) -> {100 * out['truncated_at_suggested_cap']:.1f}%")


def measure(args: argparse.Namespace, cfg: Config) -> int:
    torch.set_num_threads(cfg.local.torch_threads)
    rows = round_robin(list(read_split(environment_prepared_dir(cfg), "train")), args.games)
    path = resolve_model_path(cfg.local.model, cfg.local.models_dir)
    tokenizer = load_tokenizer(path)
    model = load_model(path, cfg.local.device, cfg.local.dtype, trainable=False)
    with job_serving(cfg, launch.start, launch.stop):
        extractions, wins = asyncio.run(extract_all(cfg, model, tokenizer, rows, args.skills,
                                                    args.cap))
    out = summarize(extractions, args.cap, cfg.sampling.extractor.max_new_tokens)
    report(out, wins, len(rows))
    if args.out:
        Path(args.out).write_text(json.dumps({**out, "model": cfg.local.model}, indent=2) + "\n",
                                  encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_gpu_qwen.yaml")
    parser.add_argument("--games", type=int, default=16, help="train games, one episode each")
    parser.add_argument("--skills", type=int, default=4, help="extractions per episode")
    parser.add_argument("--cap", type=int, default=1024, help="generous new-token cap")
    parser.add_argument("--out", default="", help="write the numbers as JSON here")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (repeatable)")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="skill_lengths_") as logs:
        overrides = [*(TINY_OVERRIDES if args.tiny else []), *args.overrides]
        return measure(args, load_config(args.config, [*overrides, *run_overrides(logs)]))


if __name__ == "__main__":
    sys.exit(main())
