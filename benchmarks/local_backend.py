"""Local-backend benchmark: batched generation, trainer step throughput, peak memory.

    .venv/bin/python -m benchmarks.local_backend [--config configs/local_cpu.yaml] [--device cuda]
        [--dtype bfloat16] [--random-weights] [--tiny]

Each measurement is paired with its baseline, run in the same process on the same inputs:
- generation, single calls: 8 concurrent `generate` calls through the micro-batcher vs the same 8
  requests awaited one after another (greedy, so both produce the same tokens);
- generation, episodes: 8 concurrent multi-turn solver episodes shaped like the pipeline's (the
  ALFWorld adapter's prompts as the local job builds the adapter from the config (action format,
  `local.lenient_actions`), with its solver reply prefix, each turn's prompt = the previous
  context + the reply + a new observation block, the config's prefix reuse, solver token cap and
  stop string) vs the same episodes run one after another; target ratio >= 3 (the issue's "8
  concurrent episodes"). Observations are synthetic, so no env server time is counted on either
  side;
- trainer: one `GRPOTrainer.step` (reference forward, KL, entropy, PPO-clip, clipping, AdamW,
  the config's gradient checkpointing) vs a bare forward + cross-entropy + backward of the same
  model on the same padded batch, in sequence tokens per second; target ratio >= 0.8;
- peak resident memory of the process holding policy + frozen reference (target < 6 GB), and
  peak CUDA memory when on a GPU;
- on CUDA only (`--device cuda`, first), today's decoder (`dynamic`) against the static-slot one
  (`static`, CUDA graphs) on the same model: the decode step in ms at 1, 8 and 32 rows of
  512-token prompts (sampling at temperature 1, every row kept running; target <= 5 ms at 32
  rows), and tokens/s of 32 concurrent episodes as above (target ratio >= 15x; the static run
  follows an untimed one that captured its graphs) with the GPU busy fraction while they run
  (NVML utilisation sampled every 50 ms: the share of time a kernel was running; target >= 50%).
The exit status is 1 when a target is missed. `--tiny` (the test suite's smoke run): 2 episodes
of 2 turns, 4 new tokens per single call, a training batch of 2 x 32 tokens; the same code path,
too small for the targets, so they are printed but not enforced.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import resource
import sys
import threading
import time

import torch

from benchmarks.cli import parse_with_tiny
from evolving_rl.clients.policy import SamplingParams
from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config import load_config
from evolving_rl.config.schema import LocalConfig
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.domains.base import Observation, TaskSpec
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import DTYPES, load_model, load_tokenizer, resolve_model_path
from evolving_rl.local.trainer import GRPOTrainer, build_token_batch
from evolving_rl.pipeline.context import make_adapter

TARGET_GENERATION, TARGET_TRAINER, TARGET_RSS_GB = 3.0, 0.8, 6.0
TARGET_STEP_MS, TARGET_STATIC_RATIO, TARGET_BUSY = 5.0, 15.0, 0.5
STEP_ROWS, STEP_PROMPT, STEPS, GPU_EPISODES = (1, 8, 32), 512, 32, 32
TINY = {"episodes": 2, "new_tokens": 4, "turns": 2, "train_samples": 2, "train_length": 32}
ROOM = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a "
        "countertop 1, a drawer {i}, a fridge 1, a microwave 1, a shelf 2, a sinkbasin 1 and a "
        "stoveburner {j}. Your task is to: put a clean {obj} in the shelf. Admissible actions: "
        "go to cabinet 1, go to countertop 1, go to drawer {i}, go to fridge 1, look, inventory. "
        "Think briefly, then answer with one action.")
OBJECTS = ("mug", "apple", "knife", "plate", "spoon", "cup", "egg", "pan")


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # Linux: KiB


def prompts(tokenizer: object, n: int) -> list[list[int]]:
    chat = HFChatTokenizer(tokenizer)
    return [chat.encode_prompt([{"role": "user", "content": ROOM.format(
        i=i + 1, j=n - i, obj=OBJECTS[i % len(OBJECTS)])}]) for i in range(n)]


async def _batched(policy: LocalPolicy, inputs: list[list[int]], sampling: SamplingParams):
    try:
        return await asyncio.gather(*(policy.generate(p, sampling) for p in inputs))
    finally:
        await policy.close()


async def _sequential(policy: LocalPolicy, inputs: list[list[int]], sampling: SamplingParams):
    try:
        return [await policy.generate(p, sampling) for p in inputs]
    finally:
        await policy.close()


def bench_generation(model, tokenizer, n: int, new_tokens: int) -> float:
    inputs = prompts(tokenizer, n)
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=new_tokens)
    results = {}
    for name, runner in (("sequential", _sequential), ("batched", _batched)):
        policy = LocalPolicy(model, tokenizer, LocalConfig(  # distinct prompts: no reuse
            max_batch_generate=n, batch_window_s=0.02, prefix_cache_entries=0), seed=0)
        started = time.perf_counter()
        out = asyncio.run(runner(policy, inputs, sampling))
        wall = time.perf_counter() - started
        tokens = sum(len(g.token_ids) for g in out)
        results[name] = (tokens / wall, out)
        print(f"generation {name:10s}: {len(inputs)} requests, prompt ~{len(inputs[0])} tokens, "
              f"{tokens} new tokens in {wall:.1f}s = {tokens / wall:.1f} tok/s, "
              f"{policy.stats.admissions} admissions, {policy.stats.steps} decode steps")
    same = all(a.token_ids == b.token_ids
               for a, b in zip(results["batched"][1], results["sequential"][1], strict=True))
    ratio = results["batched"][0] / results["sequential"][0]
    print(f"  batched / sequential throughput: {ratio:.2f}x; identical greedy tokens: {same}")
    return ratio


def synthetic_observation(episode: int, step: int) -> Observation:
    obj = OBJECTS[episode % len(OBJECTS)]
    text = (f"You arrive at drawer {step + 1}. On the drawer {step + 1}, you see a {obj} "
            f"{episode + 1}, a pen {step + 2} and a keychain 1.")
    places = ("cabinet 1", "countertop 1", f"drawer {episode + 1}", "fridge 1", "microwave 1",
              "shelf 2", "sinkbasin 1", f"stoveburner {step + 1}")
    actions = (*(f"go to {place}" for place in places), f"take {obj} {episode + 1} from drawer "
               f"{step + 1}", "inventory", "look")
    return Observation(text, actions)


async def _episode(policy: LocalPolicy, chat: HFChatTokenizer, cfg, episode: int,
                   turns: int) -> list[tuple[int, ...]]:
    """One solver episode of `turns` turns built as the pipeline builds it; its replies."""
    adapter = make_adapter(cfg, lenient=cfg.local.lenient_actions)
    prefix = chat.encode_text(cfg.pipeline.solver_reply_prefix)
    task = TaskSpec(id=str(episode), question=f"put a clean {OBJECTS[episode % 8]} in shelf.",
                    task_type="pick_clean_then_place_in_recep", split="train")
    context = chat.encode_prompt(adapter.solver_messages(task, synthetic_observation(episode, 0),
                                                         None)) + prefix
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=-1,
                              max_new_tokens=cfg.sampling.solver.max_new_tokens, stop=adapter.stop)
    replies = []
    for step in range(turns):
        generation = await policy.generate(context, sampling)
        replies.append(generation.token_ids)
        context = context + list(generation.token_ids) + chat.encode_followup(
            adapter.render_observation(step + 1, synthetic_observation(episode, step + 1)),
            generation.token_ids[-1]) + prefix
    return replies


async def _episodes(policy: LocalPolicy, chat, cfg, n: int, turns: int, concurrent: bool):
    try:
        if concurrent:
            return await asyncio.gather(*(_episode(policy, chat, cfg, i, turns)
                                          for i in range(n)))
        return [await _episode(policy, chat, cfg, i, turns) for i in range(n)]
    finally:
        await policy.close()


def bench_episodes(model, tokenizer, cfg, n: int, turns: int) -> float:
    chat = HFChatTokenizer(tokenizer)
    results = {}
    for name, concurrent in (("sequential", False), ("batched", True)):
        policy = LocalPolicy(model, tokenizer,
                             dataclasses.replace(cfg.local, max_batch_generate=n), seed=0)
        started = time.perf_counter()
        out = asyncio.run(_episodes(policy, chat, cfg, n, turns, concurrent))
        wall = time.perf_counter() - started
        tokens = sum(len(reply) for replies in out for reply in replies)
        results[name] = (tokens / wall, out)
        print(f"episodes {name:10s}: {n} x {turns} turns, {tokens} new tokens in {wall:.1f}s = "
              f"{tokens / wall:.1f} tok/s, {policy.stats.admissions} admissions, "
              f"{policy.stats.steps} decode steps, prefix tokens reused "
              f"{policy.prefixes.reused_tokens if policy.prefixes else 0}")
    same = results["batched"][1] == results["sequential"][1]
    ratio = results["batched"][0] / results["sequential"][0]
    print(f"  batched / sequential throughput: {ratio:.2f}x (target >= {TARGET_GENERATION}); "
          f"identical greedy tokens: {same}")
    return ratio


class BusySampler:
    """Mean NVML GPU utilisation (the share of time a kernel was running) sampled every 50 ms
    while inside; `fraction` is None, with `error` set, when NVML is not available."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BusySampler:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except (ImportError, OSError) as error:
            self.error = f"no NVML ({error})"
            return self
        except pynvml.NVMLError as error:
            self.error = f"NVML failed ({error})"
            return self

        def sample() -> None:
            while not self._stop.wait(0.05):
                self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def fraction(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None

    def describe(self) -> str:
        fraction = self.fraction
        return (f"{fraction:.0%} (NVML, {len(self.samples)} samples)" if fraction is not None
                else f"unavailable: {self.error or 'no samples'}")


def step_prompts(tokenizer: object, n: int) -> list[list[int]]:
    """`n` distinct prompts of exactly STEP_PROMPT tokens (room descriptions, chat-encoded)."""
    chat = HFChatTokenizer(tokenizer)
    rooms = " ".join(ROOM.format(i=i + 1, j=i + 2, obj=OBJECTS[i % len(OBJECTS)])
                     for i in range(8))
    out = [chat.encode_prompt([{"role": "user", "content": f"Episode {k}. {rooms}"}])
           for k in range(n)]
    return [ids[:STEP_PROMPT] for ids in out]


def step_ms(model, tokenizer, backend: str, rows: int) -> float:
    """Mean ms of a decode step with `rows` rows running (sampled, none allowed to stop)."""
    policy = LocalPolicy(model, tokenizer, LocalConfig(
        max_batch_generate=max(STEP_ROWS), prefix_cache_entries=0, decode_backend=backend), seed=0)
    decoder = policy.make_decoder(lambda key, generation: None)
    decoder.eos_ids = frozenset()  # every row decodes every step
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=10 ** 6)
    decoder.admit([(k, p, sampling) for k, p in enumerate(step_prompts(tokenizer, rows))])
    for _ in range(3):  # warm-up: the static decoder captures its graph here
        decoder.step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(STEPS):
        decoder.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / STEPS * 1000


def bench_decode_steps(model, tokenizer) -> float:
    """Decode-step ms per backend and row count; the static step's ms at the most rows."""
    ms = {}
    for rows in STEP_ROWS:
        ms["dynamic", rows], ms["static", rows] = (step_ms(model, tokenizer, backend, rows)
                                                 for backend in ("dynamic", "static"))
        print(f"decode step, {rows:2d} rows x {STEP_PROMPT}-token prompts: dynamic "
              f"{ms['dynamic', rows]:.1f} ms, static {ms['static', rows]:.2f} ms "
              f"({ms['dynamic', rows] / ms['static', rows]:.1f}x)")
    worst = ms["static", max(STEP_ROWS)]
    print(f"  static decode step at {max(STEP_ROWS)} rows: {worst:.2f} ms "
          f"(target <= {TARGET_STEP_MS} ms)")
    return worst


def bench_static_episodes(model, tokenizer, cfg, turns: int) -> tuple[float, float]:
    """32 concurrent episodes through each decoder: (static / dynamic tokens/s, static busy)."""
    chat = HFChatTokenizer(tokenizer)
    rates, replies, busy_static = {}, {}, 0.0
    for backend in ("dynamic", "static"):
        policy = LocalPolicy(model, tokenizer, dataclasses.replace(
            cfg.local, max_batch_generate=GPU_EPISODES, decode_backend=backend), seed=0)
        if backend == "static":  # capture the graphs these episodes use, as a long run would have
            started = time.perf_counter()
            asyncio.run(_episodes(policy, chat, cfg, GPU_EPISODES, turns, concurrent=True))
            print(f"  static warm-up run (graph capture): {time.perf_counter() - started:.1f}s, "
                  f"{len(policy._engine.graphs)} graphs")
            policy.weights_changed()  # no KV prefixes left from the warm-up
        with BusySampler() as busy:
            started = time.perf_counter()
            replies[backend] = asyncio.run(_episodes(policy, chat, cfg, GPU_EPISODES, turns,
                                                     concurrent=True))
            wall = time.perf_counter() - started
        tokens = sum(len(reply) for episode in replies[backend] for reply in episode)
        rates[backend] = tokens / wall
        busy_static = busy.fraction or 0.0
        print(f"episodes x{GPU_EPISODES} {backend:8s}: {turns} turns, {tokens} new tokens in "
              f"{wall:.1f}s = {rates[backend]:.0f} tok/s, {policy.stats.admissions} admissions, "
              f"{policy.stats.steps} decode steps ({policy.stats.admit_s:.1f}s in admissions), "
              f"GPU busy {busy.describe()}")
    ratio = rates["static"] / rates["dynamic"]
    same = sum(a == b for a, b in zip(replies["static"], replies["dynamic"], strict=True))
    print(f"  static / dynamic throughput: {ratio:.1f}x (target >= {TARGET_STATIC_RATIO}x); GPU "
          f"busy target >= {TARGET_BUSY:.0%}; identical greedy episodes {same}/{GPU_EPISODES}")
    return ratio, busy_static


def train_samples(vocab: int, n: int, length: int, seed: int = 0) -> list[TrainSample]:
    """`n` samples of `length` tokens: a quarter prompt, the rest response (1/3 masked out)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(3, vocab, (length,), generator=gen).tolist()
        split = length // 4
        mask = [0 if j % 3 == 0 else 1 for j in range(length - split)]
        out.append(TrainSample(role=Role.SOLVER if i % 2 else Role.EXTRACTOR,
                               prompt_ids=ids[:split], response_ids=ids[split:], loss_mask=mask,
                               log_probs=[-5.0 * m for m in mask], reward=float(i % 2),
                               group_id="g", advantage=1.0 if i % 2 else -1.0))
    return out


def bare_step(model, samples, cfg, pad_id: int, device) -> float:
    """Seconds of forward + cross-entropy over every token + backward (no optimiser)."""
    batch = build_token_batch(samples, cfg.loss, pad_id, device)
    model.train()
    started = time.perf_counter()
    for i in range(0, len(samples), cfg.local.micro_batch_size):
        ids = batch.input_ids[i:i + cfg.local.micro_batch_size]
        mask = batch.attention_mask[i:i + cfg.local.micro_batch_size]
        logits = model(input_ids=ids, attention_mask=mask).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(),
                                                 ids[:, 1:].flatten())
        loss.backward()
    _sync(device)
    seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    model.eval()
    return seconds


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def load(path, device: str, dtype: str, trainable: bool, random_weights: bool):
    """`load_model`, or with `random_weights` the same architecture from config.json alone,
    randomly initialised (seed 0): same shapes and timings where the weights cannot travel."""
    if not random_weights:
        return load_model(path, device, dtype, trainable)
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)),
                                             dtype=DTYPES[dtype]).to(device)
    return model if trainable else model.eval().requires_grad_(False)


def bench_trainer(path, cfg, tokenizer, n: int, length: int, extra_steps: int = 0,
                  random_weights: bool = False) -> float:
    device = cfg.local.device
    model = load(path, device, cfg.local.dtype, True, random_weights)
    ref = load(path, device, cfg.local.dtype, False, random_weights)
    samples = train_samples(len(tokenizer), n, length)
    tokens = n * length
    bare = bare_step(model, samples, cfg, int(tokenizer.pad_token_id), device)
    trainer = GRPOTrainer(model, ref, cfg.loss, cfg.local, int(tokenizer.pad_token_id))
    started = time.perf_counter()
    metrics = trainer.step(samples)
    _sync(device)
    step = time.perf_counter() - started
    ratio = bare / step
    print(f"trainer: {n} samples x {length} tokens, micro-batch {cfg.local.micro_batch_size}, "
          f"gradient checkpointing {cfg.local.gradient_checkpointing}, {cfg.local.dtype}")
    print(f"  bare forward+backward: {bare:.1f}s = {tokens / bare:.0f} tok/s; GRPO step: "
          f"{step:.1f}s = {tokens / step:.0f} tok/s (loss {metrics.loss:.4f}, kl {metrics.kl:.4f})")
    print(f"  GRPO step / bare throughput: {ratio:.2f}x (target >= {TARGET_TRAINER})")
    for _ in range(extra_steps):
        started = time.perf_counter()
        metrics = trainer.step(samples)
        _sync(device)
        print(f"  extra GRPO step on the same batch: loss {metrics.loss:.4f}, kl {metrics.kl:.5f}, "
              f"{tokens / (time.perf_counter() - started):.0f} tok/s")
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--device", help="override local.device (cpu, cuda)")
    parser.add_argument("--episodes", type=int, default=8, help="concurrent generate calls")
    parser.add_argument("--new-tokens", type=int, default=32, help="per single call")
    parser.add_argument("--turns", type=int, default=4, help="turns per episode")
    parser.add_argument("--train-samples", type=int, default=8)
    parser.add_argument("--train-length", type=int, default=256)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="override local.dtype")
    parser.add_argument("--random-weights", action="store_true",
                        help="the model folder's architecture, randomly initialised (a folder "
                        "with config.json and the tokenizer but no weights will do)")
    parser.add_argument("--no-gradient-checkpointing", action="store_true")
    parser.add_argument("--extra-train-steps", type=int, default=0,
                        help="further GRPO steps on the same batch (a short training run)")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(args.config)
    local = dataclasses.replace(
        cfg.local, device=args.device or cfg.local.device, dtype=args.dtype or cfg.local.dtype,
        gradient_checkpointing=cfg.local.gradient_checkpointing
        and not args.no_gradient_checkpointing)
    cfg = dataclasses.replace(cfg, local=local)
    torch.set_num_threads(local.torch_threads)
    path = resolve_model_path(local.model, local.models_dir)
    tokenizer = load_tokenizer(path)
    print(f"model {path} on {local.device} ({torch.get_num_threads()} torch threads)")
    policy_model = load(path, local.device, local.dtype, False, args.random_weights)
    gpu_ok = True
    if torch.device(local.device).type == "cuda":
        step = bench_decode_steps(policy_model, tokenizer)
        ratio, busy = bench_static_episodes(policy_model, tokenizer, cfg, args.turns)
        gpu_ok = step <= TARGET_STEP_MS and ratio >= TARGET_STATIC_RATIO and busy >= TARGET_BUSY
    bench_generation(policy_model, tokenizer, args.episodes, args.new_tokens)
    generation = bench_episodes(policy_model, tokenizer, cfg, args.episodes, args.turns)
    del policy_model
    trainer = bench_trainer(path, cfg, tokenizer, args.train_samples, args.train_length,
                            args.extra_train_steps, args.random_weights)
    rss = peak_rss_gb()
    print(f"peak RSS (policy + reference + trainer state): {rss:.2f} GB "
          f"(target < {TARGET_RSS_GB} GB)")
    if torch.device(local.device).type == "cuda":
        print(f"peak CUDA memory: {torch.cuda.max_memory_allocated() / 1024 ** 3:.2f} GB")
    ok = (generation >= TARGET_GENERATION and trainer >= TARGET_TRAINER and rss < TARGET_RSS_GB
          and gpu_ok)
    return 0 if ok or args.tiny else 1


if __name__ == "__main__":
    sys.exit(main())
