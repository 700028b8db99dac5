"""Skill-use probe: does a correct skill card move the solver towards the expert's actions?

    PYTHONPATH=. .venv/bin/python -m benchmarks.skill_use_probe
        [--config configs/local_gpu_qwen.yaml] [--split valid_unseen] [--games 48]
        [--placements system,task] [--out probe.json] [--set section.key=value ...] [--tiny]

Teacher-forced, no sampling: the planner walkthrough of each of the first `--games` games of
`--split` is replayed through the real ALFWorld router and workers started here
(`pipeline.expert`), and at every step of it the in-process policy scores each admissible
command as the solver's reply (the sum of the reply's token log-probs after the prompt-side
reply prefix, the dialogue so far built exactly as an episode builds it: the adapter's messages,
then per turn the expert's reply and the next observation block). Scored once without a card
and once per `--placements` entry with the hand-written card of the game's task type
(`alfworld.skill_placement`, the `written_skill` protocol's card). Per variant it prints the
expert command's probability among the admissible ones (mean), how often it is the policy's
top choice (chance: mean 1 / number of admissible commands) and, paired step by step against no
card, the mean change of its log-probability and the share of steps the card raised it; then
the ratio of top-1 shares (card / no card). A card the solver can use raises both. `--tiny` (the
test suite's smoke run): one game, one step scored, the same code path.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import json
import logging
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from tqdm import tqdm
from transformers import DynamicCache

from benchmarks.cli import parse_with_tiny
from benchmarks.solver_probe import run_overrides
from env.alfworld import launch
from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config import Config, load_config
from evolving_rl.domains.alfworld import AlfworldAdapter
from evolving_rl.domains.base import Observation, TaskSpec, Turn
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import load_model, load_tokenizer, resolve_model_path
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.pipeline.expert import replay_expert
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.retrieval.prepared import split_rows

NO_CARD = "none"
TINY = {"games": 1, "max_steps": 1}

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Demo:
    """A won expert replay of one task: its turns (observation, admissible actions, command)."""

    task: TaskSpec
    turns: list[Turn]


@dataclass(frozen=True)
class StepScore:
    """One step of a demo under one variant: the expert command's log-probability among the
    admissible commands (renormalised over them) and whether it was the top choice."""

    task_id: str
    step: int
    n_actions: int
    expert_log_prob: float
    top1: bool


async def _demos(cfg: Config, model: Any, hf_tokenizer: Any, rows: Sequence[dict],
                 max_steps: int | None) -> list[Demo]:
    """Replay the planner walkthrough of each row; won replays only (the policy plays none)."""
    policy = LocalPolicy(model, hf_tokenizer, dataclasses.replace(cfg.local, max_batch_generate=1),
                         seed=cfg.run.seed)
    ctx = await build_context(cfg, policy, HFChatTokenizer(hf_tokenizer),
                              adapter=make_adapter(cfg, cfg.local.lenient_actions))
    adapter = cast(AlfworldAdapter, ctx.adapter)
    demos = []
    try:
        for row in tqdm(rows, desc="expert replays", unit="game"):
            task = adapter.task_from_row(row)
            commands = adapter.expert_commands(task)
            replay = await replay_expert(ctx, IOClock(), adapter, task, commands or [])
            if commands and replay is not None and replay.success:
                demos.append(Demo(task, replay.turns[:max_steps]))
            else:
                logger.warning("no won expert replay of %s: left out", task.id)
    finally:
        await policy.close()
        await ctx.close()
    return demos


class Scorer:
    """Sequence log-probs of candidate replies after a token context, one batch per step."""

    def __init__(self, model: Any, tokenizer: HFChatTokenizer, reply_prefix: str) -> None:
        self.model, self.tokenizer, self.prefix = model, tokenizer, reply_prefix
        self.prefix_ids = tokenizer.encode_text(reply_prefix) if reply_prefix else []
        self.device = next(model.parameters()).device
        # transformers 5.x renames the KV-cache argument `past_key_values` -> `cache`
        self.cache_name = ("cache" if "cache" in inspect.signature(model.forward).parameters
                           else "past_key_values")

    def reply_ids(self, reply: str) -> list[int]:
        """A reply's ids after the prompt-side prefix (the solver generates only the rest)."""
        return self.tokenizer.encode_text(reply.removeprefix(self.prefix))

    @torch.no_grad()
    def log_probs(self, context: list[int], candidates: list[list[int]]) -> list[float]:
        """The context once (its KV cache repeated over the candidates), then every candidate
        right-padded in one batch; each candidate's summed token log-probs."""
        device = self.device
        cache = DynamicCache()
        prefix = self.model(input_ids=torch.tensor([context], device=device), use_cache=True,
                            **{self.cache_name: cache})
        cache.batch_repeat_interleave(len(candidates))
        width = max(len(c) for c in candidates)
        ids = torch.zeros((len(candidates), width), dtype=torch.long)
        for row, candidate in enumerate(candidates):
            ids[row, :len(candidate)] = torch.tensor(candidate)
        mask = torch.ones((len(candidates), len(context) + width), dtype=torch.long)
        positions = torch.arange(len(context), len(context) + width).expand(len(candidates), -1)
        logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                            position_ids=positions.to(device), use_cache=True,
                            **{self.cache_name: cache}).logits
        first = prefix.logits[:, -1:].expand(len(candidates), -1, -1)  # predicts token 0
        logp = torch.log_softmax(torch.cat([first, logits[:, :-1]], dim=1).float(), dim=-1)
        picked = logp.gather(-1, ids.to(device).unsqueeze(-1)).squeeze(-1).cpu()
        return [float(picked[row, :len(candidate)].sum()) for row, candidate in
                enumerate(candidates)]


def score_demo(scorer: Scorer, adapter: AlfworldAdapter, demo: Demo,
               card: str | None) -> list[StepScore]:
    """Every step of `demo` with `card` placed as `adapter` places it (a step whose expert
    command is not listed is played, not scored)."""
    tok = scorer.tokenizer
    first = Observation(demo.turns[0].observation, demo.turns[0].actions)
    context = tok.encode_prompt(adapter.solver_messages(demo.task, first, card))
    context += scorer.prefix_ids
    scores = []
    for step, turn in enumerate(demo.turns):
        observation = Observation(turn.observation, turn.actions)
        reply = scorer.reply_ids(adapter.expert_reply(turn.action, observation))
        if turn.action in turn.actions:
            replies = [scorer.reply_ids(adapter.expert_reply(a, observation))
                       for a in turn.actions]
            log_probs = scorer.log_probs(context, replies)
            top = max(log_probs)
            norm = top + math.log(sum(math.exp(lp - top) for lp in log_probs))
            expert = log_probs[turn.actions.index(turn.action)]
            scores.append(StepScore(demo.task.id, step, len(turn.actions), expert - norm,
                                    expert == top))
        if step + 1 < len(demo.turns):
            nxt = demo.turns[step + 1]
            block = adapter.render_observation(step + 1,
                                               Observation(nxt.observation, nxt.actions))
            context += reply + tok.encode_followup(block, reply[-1]) + scorer.prefix_ids
    return scores


def summarize(scores: list[StepScore], base: list[StepScore] | None) -> dict[str, float]:
    """Mean expert probability, top-1 share, chance; paired changes against `base`."""
    out = {"steps": float(len(scores)),
           "expert_prob": statistics.fmean(math.exp(s.expert_log_prob) for s in scores),
           "top1": statistics.fmean(float(s.top1) for s in scores),
           "chance_top1": statistics.fmean(1.0 / s.n_actions for s in scores)}
    if base is not None:
        deltas = [s.expert_log_prob - b.expert_log_prob for s, b in zip(scores, base, strict=True)]
        out["delta_log_prob"] = statistics.fmean(deltas)
        out["raised_share"] = statistics.fmean(float(d > 0) for d in deltas)
    return out


def _variant(cfg: Config, placement: str) -> AlfworldAdapter:
    alfworld = dataclasses.replace(cfg.alfworld, skill_placement=placement)
    variant = dataclasses.replace(cfg, alfworld=alfworld)
    return cast(AlfworldAdapter, make_adapter(variant, cfg.local.lenient_actions))


def probe(args: argparse.Namespace, cfg: Config) -> dict[str, dict[str, float]]:
    """Replay, score every variant, print the table; the summaries by variant."""
    rows = split_rows(cfg, args.split)[:args.games]
    path = resolve_model_path(cfg.local.model, cfg.local.models_dir)
    hf_tokenizer = load_tokenizer(path)
    model = load_model(path, cfg.local.device, cfg.local.dtype, trainable=False).eval()
    launch.start(cfg)
    try:
        demos = asyncio.run(_demos(cfg, model, hf_tokenizer, rows, args.max_steps))
    finally:
        launch.stop(cfg)
    scorer = Scorer(model, HFChatTokenizer(hf_tokenizer), cfg.pipeline.solver_reply_prefix)
    cards = _variant(cfg, "system").written_skill_cards()
    results: dict[str, list[StepScore]] = {}
    for variant in (NO_CARD, *args.placements.split(",")):
        adapter = _variant(cfg, "system" if variant == NO_CARD else variant)
        results[variant] = [s for demo in tqdm(demos, desc=f"scoring ({variant})", unit="game")
                            for s in score_demo(scorer, adapter, demo, None if variant == NO_CARD
                                                else cards[demo.task.task_type])]
    return report(results, len(demos), len(rows))


def report(results: dict[str, list[StepScore]], n_demos: int,
           n_games: int) -> dict[str, dict[str, float]]:
    base = results[NO_CARD]
    summaries = {name: summarize(scores, None if name == NO_CARD else base)
                 for name, scores in results.items()}
    print(f"{n_demos} of {n_games} games with a won expert replay, {len(base)} steps scored")
    for name, out in summaries.items():
        paired = (f", log-prob change {out['delta_log_prob']:+.3f}, raised at "
                  f"{out['raised_share']:.0%} of steps" if name != NO_CARD else "")
        print(f"card {name:6s}: expert prob {out['expert_prob']:.3f}, top-1 {out['top1']:.3f} "
              f"(chance {out['chance_top1']:.3f}){paired}")
    for name, out in summaries.items():
        if name != NO_CARD:
            base_top1 = summaries[NO_CARD]["top1"]
            ratio = (f"{out['top1'] / base_top1:.2f}x" if base_top1
                     else "infx" if out["top1"] else "n/a (0 with and without)")
            print(f"top-1 share, card {name} / no card: {ratio}")
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_gpu_qwen.yaml")
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--games", type=int, default=48)
    parser.add_argument("--max-steps", type=int, default=None, help="steps scored per game")
    parser.add_argument("--placements", default="system,task",
                        help="card placements to score besides no card")
    parser.add_argument("--out", type=Path, default=None, help="write the summaries as JSON")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (repeatable)")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="skill_use_probe_") as logs:
        cfg = load_config(args.config, [*args.overrides, *run_overrides(logs)])
        torch.set_num_threads(cfg.local.torch_threads)
        summaries = probe(args, cfg)
    if args.out:
        args.out.write_text(json.dumps(summaries, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
