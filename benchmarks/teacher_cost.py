"""Teacher-switch cost: one source task's downstream stage and trainer step with
`pipeline.skill_use: teacher` against the reference (`context`), on a real model.

    .venv/bin/python -m benchmarks.teacher_cost [--config configs/local_cpu.yaml]
        [--device cuda] [--dtype bfloat16] [--turns 4] [--model M] [--random-init] [--tiny]

Both sides run in one process on the same model and engine (`LocalPolicy`), greedy, with the
config's N x K x R grid, the adapter's prompts and reply prefix, the hand-written cards as the
N skills and synthetic observations (no env server, as benchmarks/local_backend.py):
- context: the N x K x R skill-conditioned episodes of one source task, concurrently;
- teacher: the same episodes, plus K x R no-skill students and each student's response scored
  with each of the N cards (`LocalPolicy.score`, docs/design.md §4.6);
- the trainer: one `GRPOTrainer.step` on the context side's samples vs one on those plus the
  students' (with their mean teacher).
Prints each wall time and the ratios teacher / context (the cost per step of the switch, before
env time), and the scoring's share of the teacher side. `--tiny`: N=1, K=1, R=1, 1 turn
on tiny-char with random weights (`--model`, `--random-init`; SmolLM2's trainer steps, ~60 tokens/s
forward and backward on one CPU thread, made it a 46 s smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import logging
import sys
import time

import torch

from benchmarks.cli import parse_with_tiny
from benchmarks.local_backend import OBJECTS, synthetic_observation
from evolving_rl.clients.policy import SamplingParams
from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config import load_config
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.core.teaching import mean_teacher
from evolving_rl.domains.base import TaskSpec
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import load_model, load_tokenizer, resolve_model_path
from evolving_rl.local.tiny_model import TINY_CHAR
from evolving_rl.local.trainer import GRPOTrainer
from evolving_rl.pipeline.context import make_adapter

# The smoke run's model is the tiny-char one with random weights: the same code path, without
# SmolLM2's ~60 tokens/s trainer steps on one CPU thread (46 s a tiny run with it, 2026-12-08).
TINY = {"n_skills": 1, "top_k": 1, "n_repeats": 1, "turns": 1, "model": TINY_CHAR,
        "random_init": True}


@dataclasses.dataclass
class Played:
    """One synthetic episode: its task, first observation and token record."""

    task: TaskSpec
    prompt: list[int]
    response: list[int] = dataclasses.field(default_factory=list)
    mask: list[int] = dataclasses.field(default_factory=list)
    log_probs: list[float] = dataclasses.field(default_factory=list)

    def sample(self, teacher: list[float] | None = None) -> TrainSample:
        return TrainSample(Role.SOLVER, self.prompt, self.response, self.mask, self.log_probs,
                           reward=0.0, group_id="g", advantage=0.5, teacher_log_probs=teacher)


class Bench:
    """The model, engine, adapter and grid both sides share."""

    def __init__(self, cfg, model, tokenizer, turns: int) -> None:
        self.cfg, self.turns = cfg, turns
        self.chat = HFChatTokenizer(tokenizer)
        self.adapter = make_adapter(cfg, lenient=cfg.local.lenient_actions)
        self.prefix = self.chat.encode_text(cfg.pipeline.solver_reply_prefix)
        self.policy = LocalPolicy(model, tokenizer, cfg.local, seed=0)
        cards = list(self.adapter.written_skill_cards().values())
        self.cards = list(itertools.islice(itertools.cycle(cards), cfg.pipeline.n_skills))
        self.sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=-1,
                                       max_new_tokens=cfg.sampling.solver.max_new_tokens,
                                       stop=self.adapter.stop)

    def prompt(self, task: TaskSpec, index: int, card: str | None) -> list[int]:
        return self.chat.encode_prompt(self.adapter.solver_messages(
            task, synthetic_observation(index, 0), card)) + self.prefix

    async def play(self, index: int, card: str | None) -> Played:
        task = TaskSpec(id=str(index), question=f"put a clean {OBJECTS[index % 8]} in shelf.",
                        task_type="pick_clean_then_place_in_recep", split="train")
        ep = Played(task, self.prompt(task, index, card))
        for step in range(self.turns):
            generation = await self.policy.generate(ep.prompt + ep.response, self.sampling)
            ep.response += generation.token_ids
            ep.mask += [1] * len(generation.token_ids)
            ep.log_probs += generation.log_probs
            block = self.chat.encode_followup(self.adapter.render_observation(
                step + 1, synthetic_observation(index, step + 1)),
                generation.token_ids[-1]) + self.prefix
            ep.response += block
            ep.mask += [0] * len(block)
            ep.log_probs += [0.0] * len(block)
        return ep

    async def teach(self, student: Played, index: int) -> list[float]:
        scored = []
        for card in self.cards:
            prompt = self.prompt(student.task, index, card)
            values = await self.policy.score(prompt + student.response, len(prompt))
            scored.append([v if m else 0.0 for v, m in zip(values, student.mask, strict=True)])
        return mean_teacher(scored)


async def _side(bench: Bench, teacher: bool) -> tuple[list[TrainSample], float, float]:
    """One downstream stage: (samples, wall seconds, seconds spent scoring)."""
    pipeline = bench.cfg.pipeline
    tasks = range(pipeline.top_k)
    started = time.perf_counter()
    cells = [bench.play(k, card) for card in bench.cards for k in tasks
             for _ in range(pipeline.n_repeats)]
    students = [bench.play(k, None) for k in tasks for _ in range(pipeline.n_repeats)] \
        if teacher else []
    played = await asyncio.gather(*cells, *students)
    scoring = time.perf_counter()
    cut = len(cells)
    teachers = await asyncio.gather(*(bench.teach(s, int(s.task.id)) for s in played[cut:]))
    done = time.perf_counter()
    samples = [p.sample() for p in played[:cut]]
    samples += [p.sample(t) for p, t in zip(played[cut:], teachers, strict=True)]
    return samples, done - started, done - scoring


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--device", help="override local.device (cpu, cuda)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="override local.dtype")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--model", help="override local.model")
    parser.add_argument("--random-init", action="store_true",
                        help="set local.random_init (weights drawn under run.seed)")
    for name in ("n_skills", "top_k", "n_repeats"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int,
                            help=f"override pipeline.{name}")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(args.config)
    sizes = {n: getattr(args, n) for n in ("n_skills", "top_k", "n_repeats") if getattr(args, n)}
    cfg = dataclasses.replace(
        cfg, pipeline=dataclasses.replace(cfg.pipeline, **sizes),
        local=dataclasses.replace(cfg.local, device=args.device or cfg.local.device,
                                  dtype=args.dtype or cfg.local.dtype,
                                  model=args.model or cfg.local.model,
                                  random_init=args.random_init or cfg.local.random_init))
    torch.set_num_threads(cfg.local.torch_threads)
    path = resolve_model_path(cfg.local.model, cfg.local.models_dir)
    model = load_model(path, cfg.local.device, cfg.local.dtype,
                       random_seed=cfg.run.seed if cfg.local.random_init else None)
    tokenizer = load_tokenizer(path)
    bench = Bench(cfg, model, tokenizer, args.turns)
    grid = f"N={cfg.pipeline.n_skills} x K={cfg.pipeline.top_k} x R={cfg.pipeline.n_repeats}"
    walls, steps = {}, {}
    for name, teacher in (("context", False), ("teacher", True)):
        samples, wall, scoring = asyncio.run(_side(bench, teacher))
        bench.policy.weights_changed()
        trainer = GRPOTrainer(model, None, dataclasses.replace(
            cfg.loss, kl_coef=dataclasses.replace(cfg.loss.kl_coef, solver=0.0, extractor=0.0)),
            cfg.local, int(tokenizer.pad_token_id))
        started = time.perf_counter()
        metrics = trainer.step(samples)
        steps[name], walls[name] = time.perf_counter() - started, wall
        print(f"{name:8s}: {grid}, {args.turns} turns: {len(samples)} episodes in {wall:.1f}s "
              f"(scoring {scoring:.1f}s); trainer step {steps[name]:.1f}s on "
              f"{metrics.n_tokens} tokens (teacher tokens {metrics.teacher_tokens})")
    print(f"teacher / context: downstream stage {walls['teacher'] / walls['context']:.2f}x, "
          f"trainer step {steps['teacher'] / steps['context']:.2f}x")
    asyncio.run(bench.policy.close())
    return 0


if __name__ == "__main__":
    sys.exit(main())
