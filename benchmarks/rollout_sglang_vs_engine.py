"""Rollout speed: SGLang against our local engine, on one multi-turn episode workload.

On one GPU (issue 41, part 4; `python3` is the interpreter that has SGLang 0.5.15.post1 from
the slime wheelhouse and this repository's requirements; the model is an HF folder, e.g. the one
`python -m evolving_rl.local.model --convert qwen2.5-coder-0.5b` writes; nothing is downloaded;
about 2-4 minutes of SGLang start-up, then seconds per round):

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH=.:src \\
    python3 -m benchmarks.rollout_sglang_vs_engine --model models/qwen2.5-coder-0.5b-instruct \\
        --device cuda --episodes 64 --turns 8 --new-tokens 32 \\
        --out runs/bench/rollout_sglang_vs_engine.json

The engine half alone (`--backends engine`, any device; the test suite runs it on the CPU with
random weights from a config folder, tests/test_rollout_benchmark.py):

    .venv/bin/python -m benchmarks.rollout_sglang_vs_engine --backends engine --tiny \\
        --random-init CONFIG_DIR [--out result.json]

The workload, the same for both backends: `--episodes` episodes in flight at once, `--turns`
turns each. An episode's first prompt is `--prompt-tokens` tokens (an ALFWorld-like task text,
repeated to length; random ids under `--random-init`), every turn generates exactly
`--new-tokens` tokens (end of sequence ignored by both: SGLang's `ignore_eos`, our engine's eos
set emptied; greedy by default, `--temperature` otherwise, seeded by `--seed` on both), then the
context grows by the reply and a fixed `--observation-tokens`-token observation, and the
episode's next prompt is that whole context: turn t's prompt is prompt + t x (new + observation)
tokens long, as an ALFWorld episode's prefix grows, and either backend may reuse the stored
prefix. An episode submits its next turn as soon as its reply arrives. Every round's prompts are
new (the round number leads them).
- sglang: `python -m sglang.launch_server` (the command of scripts/lib/eval_launch.sh, plus
  `--dtype`, `--mem-fraction-static`, `--random-seed`), started by this benchmark in its own
  process group with `env.launch.spawn_server`, healthy at `/health`, stopped (the whole group)
  when its half ends; requests through the project's `SGLangPolicyClient` (`/generate`, token ids
  in and out, log-probs on), a pool of one connection per episode. Its log: `--sglang-log`.
- engine: `LocalPolicy` as benchmarks/engine_vs_transformers.py builds it from the profile's
  `local:` section (`--config`, default configs/local_gpu_qwen.yaml on CUDA, local_cpu.yaml on
  a CPU), with `max(profile's prefix_cache_entries, --episodes)` stored prefixes unless
  `--prefix-entries` says otherwise (so that every episode in flight may keep its prefix, as
  SGLang's radix cache does).
What is measured, the same for both: the generated tokens of a round / the wall seconds of that
round, from its first request to its last reply (the client's side, HTTP included for SGLang);
model loading, server start-up and one untimed warm-up round excluded. Then `--rounds` timed
rounds; reported per backend: the median rate, the tokens of every round (checked against
episodes x turns x new tokens: exit 1 when a backend generated another count), the prompt length
of each turn and the prompt tokens it reported served from its prefix cache; then the ratio
sglang / engine, and (greedy) how many episodes' first replies the two backends agree on. The
backends run one after another on the same device (SGLang first by default: with it stopped,
the engine gets the whole GPU). `--out` writes the result as JSON. Exit 2 when the SGLang half is
asked for without a CUDA GPU or an importable `sglang`; an SGLang server that does not come up
(the end of its log is printed) or fails a request is reported (`failed` in the JSON), the other
half still runs, and the exit is 1. `--tiny`: 2 episodes, 3 turns, 4 new tokens, 1 round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.cli import parse_with_tiny
from benchmarks.engine_vs_transformers import (
    OBSERVATION,
    RANDOM_CONFIGS,
    TASK,
    load_models,
    our_policy,
)
from env.launch import (
    LaunchError,
    free_port,
    spawn_server,
    stopped_on_sigterm,
    tied_to_this_process,
    wait_for_health,
)
from evolving_rl.clients.policy import (
    Generation,
    PolicyClient,
    PolicyError,
    SamplingParams,
    SGLangPolicyClient,
)
from evolving_rl.config import load_config
from evolving_rl.config.schema import ClientConfig, LocalConfig
from evolving_rl.local.model import load_tokenizer, resolve_model_path

BACKENDS = ("sglang", "engine")
TINY = {"episodes": 2, "turns": 3, "new_tokens": 4, "prompt_tokens": 24,
        "observation_tokens": 6, "rounds": 1}
STOP_WAIT_S = 30.0
LOG_TAIL_LINES = 40


@dataclasses.dataclass(frozen=True)
class FixedLength(SamplingParams):
    """Sampling parameters whose SGLang request ignores end of sequence (`ignore_eos`), so every
    turn is `max_new_tokens` long; our engine ignores it with its eos set emptied."""

    def to_sglang(self, return_nucleus: bool = False) -> dict[str, Any]:
        return {**super().to_sglang(return_nucleus), "ignore_eos": True}


@dataclasses.dataclass(frozen=True)
class Workload:
    """One round's inputs: each episode's first prompt and the observation that follows each of
    its turns but the last."""

    prompts: tuple[tuple[int, ...], ...]
    observations: tuple[tuple[tuple[int, ...], ...], ...]  # [episode][turn], turns - 1 each
    sampling: FixedLength

    @property
    def expected_tokens(self) -> int:
        return len(self.prompts) * (len(self.observations[0]) + 1) * self.sampling.max_new_tokens


@dataclasses.dataclass
class Episode:
    """A played episode: the prompt length of each turn and each turn's generation."""

    prompt_lengths: list[int]
    replies: list[Generation]


@dataclasses.dataclass
class BackendResult:
    """One backend's timed rounds (what the JSON result holds per backend)."""

    wall_s: list[float] = dataclasses.field(default_factory=list)
    generated_tokens: list[int] = dataclasses.field(default_factory=list)
    cached_prompt_tokens: list[int] = dataclasses.field(default_factory=list)
    prompt_tokens_by_turn: list[int] = dataclasses.field(default_factory=list)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    first_replies: list[tuple[int, ...]] = dataclasses.field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(n / wall for n, wall in zip(self.generated_tokens, self.wall_s,
                                                             strict=True))

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        del out["first_replies"]
        return {"tokens_per_s": self.tokens_per_s, **out}


# --- the workload -----------------------------------------------------------------------------

def _fit(ids: list[int], length: int) -> tuple[int, ...]:
    """`ids` repeated to at least `length` tokens, cut at `length`."""
    while len(ids) < length:
        ids = ids + ids
    return tuple(ids[:length])


def build_workload(args: argparse.Namespace, tokenizer: Any | None, vocab: int,
                   rnd: int) -> Workload:
    """Round `rnd`'s prompts and observations: texts through `tokenizer`, else seeded ids."""
    n, turns = args.episodes, args.turns
    if tokenizer is not None:
        def text(template: str, length: int, **fields: int) -> tuple[int, ...]:
            return _fit(tokenizer.encode(template.format(**fields), add_special_tokens=False),
                        length)

        prompts = tuple(text(TASK, args.prompt_tokens, r=rnd, i=i + 1, j=n - i)
                        for i in range(n))
        observations = tuple(tuple(text(OBSERVATION, args.observation_tokens, t=t + 1, i=i + 1,
                                        j=t + i + 2) for t in range(turns - 1)) for i in range(n))
    else:
        gen = torch.Generator().manual_seed(1000 + rnd)

        def draw(size: int) -> tuple[int, ...]:
            return tuple(torch.randint(3, vocab, (size,), generator=gen).tolist())

        prompts = tuple(draw(args.prompt_tokens) for _ in range(n))
        observations = tuple(tuple(draw(args.observation_tokens) for _ in range(turns - 1))
                             for _ in range(n))
    sampling = FixedLength(temperature=args.temperature, top_p=1.0, top_k=-1,
                           max_new_tokens=args.new_tokens)
    return Workload(prompts, observations, sampling)


async def play_episode(client: PolicyClient, work: Workload, i: int) -> Episode:
    """Episode `i`: each turn's prompt is the last prompt + its reply + the next observation."""
    context = list(work.prompts[i])
    episode = Episode([], [])
    for t in range(len(work.observations[i]) + 1):
        if t:
            context = context + list(episode.replies[-1].token_ids) + list(
                work.observations[i][t - 1])
        episode.prompt_lengths.append(len(context))
        episode.replies.append(await client.generate(context, work.sampling))
    return episode


async def play(client: PolicyClient, work: Workload) -> tuple[list[Episode], float]:
    """Every episode at once through `client`; (episodes, wall seconds of the round)."""
    started = time.perf_counter()
    episodes = await asyncio.gather(*(play_episode(client, work, i)
                                      for i in range(len(work.prompts))))
    return list(episodes), time.perf_counter() - started


Round = Callable[[Workload], tuple[list[Episode], float, int]]  # -> episodes, wall, cached tokens


def time_backend(name: str, play_round: Round, workloads: list[Workload]) -> BackendResult:
    """`workloads[0]` untimed (warm-up), then one timed round per further workload."""
    result = BackendResult()
    started = time.perf_counter()
    play_round(workloads[0])
    print(f"{name:6s} untimed warm-up round: {time.perf_counter() - started:.1f}s", flush=True)
    for rnd, work in enumerate(workloads[1:], start=1):
        episodes, wall, cached = play_round(work)
        tokens = sum(len(g.token_ids) for e in episodes for g in e.replies)
        result.wall_s.append(wall)
        result.generated_tokens.append(tokens)
        result.cached_prompt_tokens.append(cached)
        if rnd == 1:
            result.prompt_tokens_by_turn = episodes[0].prompt_lengths
            result.first_replies = [e.replies[0].token_ids for e in episodes]
        print(f"round {rnd} {name:6s}: {tokens} generated tokens (expected "
              f"{work.expected_tokens}) in {wall:.2f}s = {tokens / wall:.1f} tok/s; prompt "
              f"tokens served from the prefix cache {cached}", flush=True)
    return result


# --- the two backends -------------------------------------------------------------------------

def engine_half(args: argparse.Namespace, local: LocalConfig,
                workloads: list[Workload]) -> BackendResult:
    """Our engine: the model loaded on the device, `LocalPolicy` from the profile."""
    model, tokenizer = load_models(args)
    local = dataclasses.replace(local, prefix_cache_entries=args.prefix_entries)
    policy = our_policy(model, tokenizer, local, args.seed)

    def reused() -> int:
        return policy.prefixes.reused_tokens if policy.prefixes else 0

    def play_round(work: Workload) -> tuple[list[Episode], float, int]:
        before = reused()
        episodes, wall = asyncio.run(play(policy, work))  # the engine thread outlives the loop
        return episodes, wall, reused() - before

    try:
        result = time_backend("engine", play_round, workloads)
    finally:
        asyncio.run(policy.close())
    result.settings = {"decoder": "static" if policy.static else "dynamic",
                       "max_batch": policy.max_batch, "prefix_entries": args.prefix_entries,
                       "config": args.config, "torch_threads": torch.get_num_threads()}
    return result


def sglang_command(args: argparse.Namespace, port: int) -> list[str]:
    return [args.sglang_python, "-m", "sglang.launch_server", "--model-path", str(args.model),
            "--host", "127.0.0.1", "--port", str(port), "--tp-size", "1",
            "--dtype", args.dtype, "--mem-fraction-static", str(args.sglang_mem_fraction),
            "--random-seed", str(args.seed)]


def _stop_group(process: subprocess.Popen) -> None:
    """Stop the process group this benchmark started (SGLang's server and its workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        logging.warning("SGLang ignored SIGTERM for %.0f s: SIGKILL", STOP_WAIT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def sglang_server(command: list[str], port: int, args: argparse.Namespace) -> Iterator[str]:
    """SGLang started by `command` (listening on `port`): its URL once healthy; stopped, with its
    process group, on exit, also when this benchmark gets SIGTERM (and by the kernel when it is
    killed outright: `tied_to_this_process`). `LaunchError` (with the log's tail) when it exits
    or is not healthy within `--sglang-start-timeout`."""
    log = Path(args.sglang_log)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with stopped_on_sigterm():
        with tied_to_this_process():
            process = spawn_server(command, log, env)
        try:
            yield _healthy(process, f"http://127.0.0.1:{port}", log, args.sglang_start_timeout)
        finally:
            _stop_group(process)


def _healthy(process: subprocess.Popen, url: str, log: Path, timeout_s: float) -> str:
    """`url` once `/health` answers 200; `LaunchError` with the log's tail otherwise."""
    try:
        wait_for_health(f"{url}/health", timeout_s, process, poll_s=2.0, names_pid=False)
    except LaunchError as error:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
        raise LaunchError(f"{error}; the end of {log}:\n{tail}") from None
    return url


def sglang_half(args: argparse.Namespace, workloads: list[Workload]) -> BackendResult:
    """SGLang: started here, every request through `SGLangPolicyClient`."""
    clients = ClientConfig(policy_timeout_s=args.sglang_request_timeout, max_retries=0,
                           pool_size=args.episodes)

    def play_round_at(url: str) -> Round:
        async def one(work: Workload) -> tuple[list[Episode], float, int]:
            client = SGLangPolicyClient.open(url, clients)
            try:
                episodes, wall = await play(client, work)
            finally:
                await client.close()
            cached = sum(g.prefix_cache.cached_tokens for e in episodes for g in e.replies)
            return episodes, wall, cached

        return lambda work: asyncio.run(one(work))

    port = free_port()
    command = sglang_command(args, port)
    started = time.perf_counter()
    with sglang_server(command, port, args) as url:
        print(f"sglang healthy at {url} after {time.perf_counter() - started:.0f}s "
              f"(log {args.sglang_log})", flush=True)
        result = time_backend("sglang", play_round_at(url), workloads)
    result.settings = {"command": command, "sglang_version": args.sglang_version}
    return result


def sglang_problem(args: argparse.Namespace) -> str | None:
    """Why the SGLang half cannot run here (no CUDA GPU, no sglang, no weights), or None; sets
    `args.sglang_version`."""
    if args.random_init:
        return "the SGLang half needs real weights (--model), not --random-init"
    if torch.device(args.device).type != "cuda" or not torch.cuda.is_available():
        return (f"the SGLang half needs a CUDA GPU (--device cuda): device {args.device}, "
                f"CUDA available: {torch.cuda.is_available()}")
    probe = subprocess.run([args.sglang_python, "-c", "import sglang; print(sglang.__version__)"],
                           capture_output=True, text=True, check=False)
    if probe.returncode:
        return f"{args.sglang_python} cannot import sglang: {probe.stderr.strip()[-500:]}"
    args.sglang_version = probe.stdout.strip()
    return None


# --- the command line -------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sglang,engine",
                        help="comma-separated, run in this order: sglang, engine")
    parser.add_argument("--model", help="HF folder (weights and tokenizer); default: the "
                        "profile's `local.model`")
    parser.add_argument("--random-init", metavar="CONFIG_NAME_OR_DIR",
                        help="engine only: random weights from a config ("
                        f"{', '.join(RANDOM_CONFIGS)} or a folder with config.json) and random "
                        "prompt ids")
    parser.add_argument("--config", help="the profile whose `local:` builds our engine")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"),
                        help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--observation-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefix-entries", type=int,
                        help="our engine's stored prefixes (default: max(profile, --episodes))")
    parser.add_argument("--sglang-python", default=sys.executable,
                        help="the interpreter that has sglang (default: this one)")
    parser.add_argument("--sglang-mem-fraction", type=float, default=0.5)
    parser.add_argument("--sglang-start-timeout", type=float, default=900.0)
    parser.add_argument("--sglang-request-timeout", type=float, default=600.0)
    parser.add_argument("--sglang-log", default="runs/bench/rollout_sglang.log")
    parser.add_argument("--out", help="write the result here as JSON")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The arguments with every default resolved (profile, model, dtype, prefix entries)."""
    parser = build_parser()
    args = parse_with_tiny(parser, argv, TINY)
    args.backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    if not args.backends or not set(args.backends) <= set(BACKENDS):
        parser.error(f"--backends takes sglang and/or engine: {args.backends}")
    if min(args.episodes, args.turns, args.new_tokens, args.prompt_tokens, args.rounds) < 1:
        parser.error("--episodes, --turns, --new-tokens, --prompt-tokens, --rounds must be >= 1")
    cuda = torch.device(args.device).type == "cuda"
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.config = args.config or ("configs/local_gpu_qwen.yaml" if cuda
                                  else "configs/local_cpu.yaml")
    args.local = load_config(args.config).local
    args.sglang_version = None  # set by sglang_problem
    if args.prefix_entries is None:
        args.prefix_entries = max(args.local.prefix_cache_entries, args.episodes)
    return args


def _vocab(args: argparse.Namespace) -> int:
    if args.random_init in RANDOM_CONFIGS:
        return int(RANDOM_CONFIGS[args.random_init]["vocab_size"])
    return int(json.loads((Path(args.random_init) / "config.json").read_text())["vocab_size"])


def workloads_for(args: argparse.Namespace) -> list[Workload]:
    """The warm-up round's workload, then each timed round's (the same for both backends)."""
    tokenizer, vocab = None, 0
    if args.random_init:
        vocab = _vocab(args)
    else:
        tokenizer = load_tokenizer(args.model)
    return [build_workload(args, tokenizer, vocab, rnd) for rnd in range(args.rounds + 1)]


def summary(args: argparse.Namespace, results: dict[str, BackendResult],
            expected: int) -> dict[str, Any]:
    """The JSON result; prints the SUMMARY line."""
    ratio = agree = None
    if len(results) == len(BACKENDS):
        ratio = results["sglang"].tokens_per_s / results["engine"].tokens_per_s
        agree = sum(a == b for a, b in zip(results["sglang"].first_replies,
                                           results["engine"].first_replies, strict=True))
    parts = [f"{name} {result.tokens_per_s:.1f} tok/s ({sum(result.generated_tokens)} tokens "
             f"in {len(result.wall_s)} rounds)" for name, result in results.items()]
    if ratio is not None:
        parts.append(f"sglang/engine {ratio:.2f}x; first replies identical in {agree} of "
                     f"{args.episodes} episodes")
    print(f"SUMMARY {args.device} {args.dtype} {args.random_init or Path(args.model).name}, "
          f"{args.episodes} episodes x {args.turns} turns x {args.new_tokens} new tokens "
          f"(prompt {args.prompt_tokens}, observations {args.observation_tokens}), median of "
          f"{args.rounds} rounds: " + "; ".join(parts))
    workload = {key: getattr(args, key) for key in (
        "episodes", "turns", "new_tokens", "prompt_tokens", "observation_tokens", "temperature",
        "rounds", "seed")}
    return {"benchmark": "rollout_sglang_vs_engine", "device": args.device, "dtype": args.dtype,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "model": args.random_init or str(args.model), "random_weights": bool(args.random_init),
            "workload": {**workload, "expected_tokens_per_round": expected},
            "backends": {name: result.to_json() for name, result in results.items()},
            "ratio_sglang_over_engine": ratio, "first_replies_identical": agree}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if "sglang" in args.backends and (problem := sglang_problem(args)):
        print(f"rollout_sglang_vs_engine: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.local.torch_threads)
    if args.model is None and not args.random_init:
        args.model = str(resolve_model_path(args.local.model, args.local.models_dir))
    workloads = workloads_for(args)
    expected = workloads[0].expected_tokens
    growth = args.new_tokens + args.observation_tokens
    print(f"model {args.random_init or args.model}, {args.device} {args.dtype}; workload: "
          f"{args.episodes} episodes x {args.turns} turns x {args.new_tokens} new tokens "
          f"(temperature {args.temperature}), first prompt {args.prompt_tokens} tokens, "
          f"observations {args.observation_tokens}, last prompt "
          f"{args.prompt_tokens + (args.turns - 1) * growth} tokens; {expected} generated "
          "tokens a round", flush=True)
    results, failed = run_halves(args, workloads)
    result = summary(args, results, expected)
    result["failed"] = failed
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    wrong = [name for name, r in results.items() if set(r.generated_tokens) != {expected}]
    if wrong:
        print(f"wrong token counts (expected {expected} a round): {', '.join(wrong)}")
    return 1 if wrong or failed else 0


def run_halves(args: argparse.Namespace, workloads: list[Workload]
               ) -> tuple[dict[str, BackendResult], dict[str, str]]:
    """Each backend of `--backends` in turn: (results, {backend: why it failed}). An SGLang
    server that does not start or answer is reported and the other half still runs."""
    halves = {"sglang": lambda: sglang_half(args, workloads),
              "engine": lambda: engine_half(args, args.local, workloads)}
    results, failed = {}, {}
    for name in args.backends:
        try:
            results[name] = halves[name]()
        except (LaunchError, PolicyError) as error:
            failed[name] = f"{type(error).__name__}: {error}"
            print(f"{name} half failed: {failed[name]}", flush=True)
        gc.collect()  # the engine's model and KV slots, before SGLang takes the GPU
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results, failed


if __name__ == "__main__":
    sys.exit(main())
