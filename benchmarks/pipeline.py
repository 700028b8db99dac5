"""Pipeline benchmark: one rollout with an instant scripted policy against the real servers.

    .venv/bin/python -m benchmarks.pipeline [--config configs/local_cpu.yaml] [--max-steps 10]
        [--set section.key=value ...] [--tiny]

(run from the repository root, so that `env`, `tests` and `benchmarks` import).

Starts the real ALFWorld router + workers (`env.alfworld.launch`) and the real retrieval server
(`env.retrieval.launcher`, cache built first) on free ports with logs in a temporary folder, then
runs one training rollout of 2 source tasks x N=4 skills x K=2 retrieved tasks (R=1) with the
scripted policy of `tests/fakes` (it picks an admissible action from the observation and writes
valid skill JSON, instantly). The rollout runs under the config's protocol, as the local job
builds it: its adapter (action format, lenient parsing as `local.lenient_actions` says) and its
prompt-side reply prefixes, which the scripted replies continue instead of repeating. Prints:
- pipeline overhead = wall - time covered by waiting on env/retrieval/policy, as a fraction of
  wall (target <= 10%), and the pipeline process's CPU time over wall as a cross-check;
- downstream overlap = wall of the downstream stage / sequential sum of its episode durations
  (target <= 0.35).
Every server it started is stopped on exit. `--tiny` (the test suite's smoke run) plays 2 source
tasks x N=2 x K=1 for at most 2 steps: the same code path, too small for the targets, so they are
printed but not enforced (exit status 0 once the rollout ran).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from env.launch import free_port, free_port_block
from env.retrieval.launcher import start_retrieval_server, stop_retrieval_server
from evolving_rl.config import Config, load_config, to_dict
from evolving_rl.core.actions import extract_action
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.pipeline.rollout import run_training_rollout
from evolving_rl.retrieval.prepared import environment_prepared_dir, read_split
from tests.fakes.scripted import (
    EXTRACTOR_MARKER,
    Responder,
    ScriptedPolicy,
    admissible_from_prompt,
    reply_text,
)
from tests.fakes.tokenizer import ByteChatTokenizer

TARGET_OVERHEAD, TARGET_OVERLAP = 0.10, 0.35


@dataclass(frozen=True)
class Sizes:
    """One rollout's shape: source tasks x N skills x K retrieved tasks (R=1)."""

    source_tasks: int
    n_skills: int
    top_k: int


FULL, TINY = Sizes(source_tasks=2, n_skills=4, top_k=2), Sizes(source_tasks=2, n_skills=2, top_k=1)
TINY_MAX_STEPS = 2


def bench_config(base: Path, overrides: list[str], folder: Path, sizes: Sizes,
                 max_steps: int) -> Path:
    """`base` (with `overrides`) at the benchmark's sizes, on free ports, outputs in `folder`."""
    data = to_dict(load_config(base, overrides))
    data["pipeline"].update(n_skills=sizes.n_skills, top_k=sizes.top_k, n_repeats=1,
                            max_steps=max_steps, source_tasks_per_rollout=sizes.source_tasks,
                            max_context_tokens=32768,
                            retrieval_split="train")
    # The scripted policy speaks through a byte-level tokenizer: caps sized for bytes, not for
    # the profile's model, so that no reply is truncated.
    for role, tokens in (("solver", 256), ("extractor", 4096)):
        data["sampling"][role].update(max_new_tokens=tokens, temperature=1.0)
    port = free_port_block(1 + data["alfworld"]["n_workers"])
    data["alfworld"].update(port=port, worker_base_port=port + 1,
                            log_dir=str(folder / "alfworld_logs"))
    taken = range(port, port + 1 + data["alfworld"]["n_workers"])
    data["retrieval"].update(port=free_port(exclude=taken), cache_path=str(folder / "cache.npz"),
                             log_dir=str(folder / "retrieval_logs"), device="cpu")
    data["run"]["output_dir"] = str(folder / "run")
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def alfworld_launch(action: str, config: Path) -> None:
    subprocess.run([sys.executable, "-m", "env.alfworld.launch", action, "--config",
                    str(config)], check=True)


def source_rows(cfg: Config, n: int) -> list[dict]:
    """The first task of each of the first `n` task types of the training split."""
    rows, seen = [], set()
    for row in read_split(environment_prepared_dir(cfg), "train"):
        if row.task_type not in seen:
            seen.add(row.task_type)
            rows.append(row.as_dict())
    return rows[:n]


def protocol_responder(cfg: Config) -> Responder:
    """The scripted replies in `cfg`'s protocol: with the "number" action format the solver
    answers with the number of the scripted command, and a reply continues its role's
    prompt-side prefix (already at the end of the prompt) instead of repeating it."""

    def respond(prompt: str) -> str:
        text = reply_text(prompt)
        if EXTRACTOR_MARKER in prompt:
            return text.removeprefix(cfg.pipeline.extractor_reply_prefix)
        actions, action = admissible_from_prompt(prompt), extract_action(text)
        if cfg.alfworld.action_format == "number" and action in actions:
            text = f"<action>{actions.index(action) + 1}</action>"
        return text.removeprefix(cfg.pipeline.solver_reply_prefix)

    return respond


async def one_rollout(cfg: Config, n_sources: int) -> tuple[dict[str, float], float]:
    tokenizer = ByteChatTokenizer()
    ctx = await build_context(cfg, ScriptedPolicy(tokenizer, protocol_responder(cfg)), tokenizer,
                              adapter=make_adapter(cfg, lenient=cfg.local.lenient_actions))
    try:
        cpu = time.process_time()
        outcome = await run_training_rollout(ctx, source_rows(cfg, n_sources), rollout_id="bench")
        return outcome.metrics, time.process_time() - cpu
    finally:
        await ctx.close()


def report(metrics: dict[str, float], cpu_s: float, sizes: Sizes) -> bool:
    wall = metrics["timing/wall_s"]
    overhead = metrics["timing/overhead_fraction"]
    overlap = metrics["timing/downstream_overlap"]
    print(f"rollout: {sizes.source_tasks} source tasks x N={sizes.n_skills} x K={sizes.top_k}: "
          f"{metrics['solver/episodes']:.0f} downstream episodes, wall {wall:.2f}s")
    for key in ("env", "retrieval", "policy"):
        print(f"  waiting on {key:9s}: covered {metrics[f'timing/{key}_wait_covered_s']:.2f}s, "
              f"summed {metrics[f'timing/{key}_wait_summed_s']:.2f}s, "
              f"{metrics[f'timing/{key}_calls']:.0f} calls")
    print(f"  samples: solver {metrics['solver/samples']:.0f}, extractor "
          f"{metrics['extractor/samples']:.0f}; downstream success "
          f"{metrics['solver/success_rate']:.2f}")
    print(f"pipeline overhead: {overhead:.1%} of wall (target <= {TARGET_OVERHEAD:.0%}); "
          f"pipeline process CPU {cpu_s:.2f}s = {cpu_s / wall:.1%} of wall")
    print(f"downstream overlap: {overlap:.3f} (stage wall "
          f"{metrics['timing/downstream_stage_wall_s']:.2f}s / sequential sum "
          f"{metrics['timing/downstream_episodes_sum_s']:.2f}s; target <= {TARGET_OVERLAP})")
    return overhead <= TARGET_OVERHEAD and overlap <= TARGET_OVERLAP


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (repeatable)")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="smoke sizes, targets not enforced")
    args = parser.parse_args(argv)
    if args.tiny:
        parser.set_defaults(max_steps=TINY_MAX_STEPS)
        args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        config = bench_config(args.config, args.overrides, Path(tmp), sizes, args.max_steps)
        cfg = load_config(config)
        subprocess.run([sys.executable, "-m", "evolving_rl.retrieval.build", "--config",
                        str(config)], check=True, stdout=subprocess.DEVNULL)
        start_retrieval_server(cfg)
        try:
            alfworld_launch("start", config)
            try:
                metrics, cpu_s = asyncio.run(one_rollout(cfg, sizes.source_tasks))
            finally:
                alfworld_launch("stop", config)
        finally:
            stop_retrieval_server(cfg)
    met = report(metrics, cpu_s, sizes)
    return 0 if met or args.tiny else 1


if __name__ == "__main__":
    sys.exit(main())
