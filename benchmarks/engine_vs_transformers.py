"""Our inference engine vs transformers' continuous batching, on one multi-turn workload.

    .venv/bin/python -m benchmarks.engine_vs_transformers [--config PROFILE] [--model PATH]
        [--device cpu] [--dtype float32] [--episodes 8] [--turns 3] [--new-tokens 16]
        [--rounds 3] [--random-init qwen2.5-0.5b|CONFIG_DIR] [--cb-graphs auto]
        [--cb-transposed] [--budget-s S] [--tiny]

The decision of docs/design.md §6.7 ("The inference engine: a measured decision"): keep our engine
only where transformers' `ContinuousBatchingManager` (what `generate_batch` wraps) is more than
1.3x slower on the same work, or does not give the raw temperature-1 log-probs the trainer needs.

The workload: `--episodes` episodes at once, `--turns` turns each. A turn generates exactly
`--new-tokens` tokens (temperature 1, top-p 1, no top-k; end-of-sequence ignored by both engines,
so both do the same work whatever they sample), then the episode's context grows by the reply and
a fixed synthetic observation of `--observation-tokens` tokens, and its next request is that whole
context (a prompt that extends the previous turn's: both engines may reuse the stored prefix). An
episode submits its next turn as soon as its reply arrives, while the others keep decoding.
- ours: `LocalPolicy.generate` (asyncio), built as the local job builds it from the profile
  (`--config`, default configs/local_cpu.yaml on a CPU and configs/local_gpu_qwen.yaml on CUDA:
  its `max_batch_generate`, `batch_window_s`, `prefix_cache_entries`, `decode_backend`,
  `static_cache_tokens`, `torch_threads`);
- transformers: one `ContinuousBatchingManager` (`model.init_continuous_batching`, warmed up,
  started once) fed by `add_request` / `get_result`, `return_logprobs=True`; its paged cache is
  sized for the workload (`--cb-page-size`, blocks for every episode's whole context twice over,
  `max_batch_tokens` = every episode's first prompt at once): with its memory-based defaults
  4 requests of 16 tokens took 55 s on a 2-core CPU, 3 s sized. `--cb-graphs` lists the
  variants to run: `auto` (the library decides CUDA graphs; off with an attention mask, i.e.
  without flash attention), `on` (forced).
  `--cb-transposed` adds the library on a model whose linear layers use our CPU weight layout
  (`cb-tw`: how much of a CPU gap that 40-line layout explains).
Each engine runs once untimed (our static decoder captures its CUDA graphs, the library warms up),
then `--rounds` timed rounds, alternating which engine goes first; every round's prompts are new
(the round number leads each prompt), so no round reuses another's KV. Reported: new tokens/s
and wall per round (median), the ratio library / ours of the medians and the median of each
round's ratio (paired: the two runs of a round are adjacent in time, so on a shared machine a
load change moves both; the verdict uses it), and the largest |log-prob difference|
between what each engine returned and a reference forward pass of an unmodified copy of the
model over each finished episode (log-softmax of its logits in float32, at the sampled tokens).
`--random-init` builds the model from a config with random weights (seed 0) where the weights are
not at hand (the device machine): `qwen2.5-0.5b` is the GPU profile's model's shape, or give a
folder with a config.json; the prompts are then synthetic token ids. The last line printed is
the one-line summary. `--tiny` (the test suite's smoke run): 2 episodes, 2 turns, 4 new tokens,
1 round.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.cli import parse_with_tiny
from evolving_rl.clients.policy import SamplingParams
from evolving_rl.config import load_config
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import resolve_model_path

STARTED = time.perf_counter()
RATIO_RULE = 1.3  # the library qualifies when ours is at most this much faster
TINY = {"episodes": 2, "turns": 2, "new_tokens": 4, "rounds": 1, "observation_tokens": 12}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Qwen2.5-0.5B(-Coder)-Instruct's shape: the GPU profile's model (configs/local_gpu_qwen.yaml).
QWEN_05B = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
            "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
            "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True,
            "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645}
RANDOM_CONFIGS = {"qwen2.5-0.5b": QWEN_05B}
TASK = ("Round {r}, episode {i}. You are in the middle of a room. Looking quickly around you, you "
        "see a cabinet {i}, a countertop 1, a drawer {j}, a fridge 1, a microwave 1, a shelf 2, a "
        "sinkbasin 1 and a stoveburner {j}. Your task is to: put a clean mug in the shelf. Think "
        "briefly, then answer with one action.")
OBSERVATION = ("Observation {t}: you arrive at drawer {i}. On the drawer {i}, you see a mug {t}, "
               "a pen {j}, a keychain 1 and a spoon 3. Admissible actions: go to cabinet 1, take "
               "mug {t} from drawer {i}, inventory, look, examine drawer {i}. Next action:")


@dataclasses.dataclass(frozen=True)
class Workload:
    """One round's inputs: each episode's first prompt and its observation after every turn."""

    prompts: tuple[tuple[int, ...], ...]
    observations: tuple[tuple[tuple[int, ...], ...], ...]  # [episode][turn]
    new_tokens: int


@dataclasses.dataclass
class Episode:
    """A finished episode: its whole context and, per turn, (start, sampled ids, log-probs)."""

    context: list[int]
    turns: list[tuple[int, tuple[int, ...], tuple[float, ...]]]


def _text_ids(tokenizer: Any, text: str, length: int) -> tuple[int, ...]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    while len(ids) < length:
        ids = ids + ids
    return tuple(ids[:length])


def workload(tokenizer: Any | None, vocab: int, args: argparse.Namespace, rnd: int) -> Workload:
    """Round `rnd`'s prompts: text through `tokenizer`, or seeded synthetic ids without one."""
    n, turns, obs = args.episodes, args.turns, args.observation_tokens
    if tokenizer is not None:
        prompts = tuple(tuple(tokenizer.encode(TASK.format(r=rnd, i=i + 1, j=n - i),
                                               add_special_tokens=False)) for i in range(n))
        observations = tuple(tuple(_text_ids(tokenizer, OBSERVATION.format(t=t + 1, i=i + 1,
                                                                           j=t + i + 2), obs)
                                   for t in range(turns)) for i in range(n))
    else:
        gen = torch.Generator().manual_seed(1000 + rnd)
        draw = lambda size: tuple(torch.randint(100, vocab - 100, (size,), generator=gen).tolist())  # noqa: E731
        prompts = tuple(draw(96) for _ in range(n))
        observations = tuple(tuple(draw(obs) for _ in range(turns)) for _ in range(n))
    return Workload(prompts, observations, args.new_tokens)


# --- ours -------------------------------------------------------------------------------------

async def _our_episode(policy: LocalPolicy, work: Workload, i: int) -> Episode:
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1,
                              max_new_tokens=work.new_tokens)
    episode = Episode(list(work.prompts[i]), [])
    for t, observation in enumerate(work.observations[i]):
        generation = await policy.generate(episode.context, sampling)
        episode.turns.append((len(episode.context), generation.token_ids, generation.log_probs))
        episode.context = episode.context + list(generation.token_ids)
        if t + 1 < len(work.observations[i]):
            episode.context += list(observation)
    return episode


def run_ours(policy: LocalPolicy, work: Workload) -> tuple[list[Episode], float]:
    async def play() -> list[Episode]:
        return await asyncio.gather(*(_our_episode(policy, work, i)
                                      for i in range(len(work.prompts))))

    started = time.perf_counter()
    episodes = asyncio.run(play())  # the engine thread outlives the loop: it idles between rounds
    return episodes, time.perf_counter() - started


# --- transformers' continuous batching --------------------------------------------------------

def cb_manager(model: Any, args: argparse.Namespace, graphs: str, max_context: int,
               first_prompt: int) -> Any:
    """A started `ContinuousBatchingManager` of `model`, warmed up, sized for the workload."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    generation = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  max_new_tokens=args.new_tokens, eos_token_id=-1)
    per_episode = -(-max_context // args.cb_page_size) + 1
    fields = {field.name for field in dataclasses.fields(ContinuousBatchingConfig)}
    page = "page_size" if "page_size" in fields else "block_size"  # renamed in transformers 5.17+
    options: dict[str, Any] = {
        "return_logprobs": True, "seed": args.seed, page: args.cb_page_size,
        "num_blocks": 2 * args.episodes * per_episode,
        "max_batch_tokens": max(256, args.episodes * first_prompt),
        "max_requests_per_batch": args.episodes}
    if graphs != "auto":
        options["use_cuda_graph"] = graphs == "on"
    manager = model.init_continuous_batching(
        generation_config=generation,
        continuous_batching_config=ContinuousBatchingConfig(**options))
    manager.warmup()
    manager.start()
    return manager


def run_cb(manager: Any, work: Workload) -> tuple[list[Episode], float]:
    """Every episode's turns through `manager`; each next turn is submitted on its reply."""
    episodes = [Episode(list(p), []) for p in work.prompts]
    turns = len(work.observations[0])

    def submit(i: int) -> None:
        request = f"{id(work)}-{i}-{len(episodes[i].turns)}"
        manager.add_request(episodes[i].context, request_id=request,
                            max_new_tokens=work.new_tokens, eos_token_id=-1)

    started = time.perf_counter()
    for i in range(len(episodes)):
        submit(i)
    running = len(episodes)
    while running:
        result = manager.get_result(timeout=30)
        if result is None:
            raise RuntimeError("transformers' continuous batching returned nothing for 30 s")
        if not result.is_finished():
            continue
        if result.error is not None:
            raise RuntimeError(f"transformers' continuous batching failed: {result.error}")
        i = int(result.request_id.split("-")[1])
        episode = episodes[i]
        ids = tuple(result.generated_tokens)
        episode.turns.append((len(episode.context), ids, tuple(result.logprobs)))
        episode.context = episode.context + list(ids)
        if len(episode.turns) < turns:
            episode.context += list(work.observations[i][len(episode.turns) - 1])
            submit(i)
        else:
            running -= 1
    return episodes, time.perf_counter() - started


# --- checks and the report --------------------------------------------------------------------

@torch.no_grad()
def logprob_error(reference: Any, episodes: Sequence[Episode], device: str) -> float:
    """Largest |returned log-prob - reference log-softmax| over every sampled token."""
    worst = 0.0
    for episode in episodes:
        ids = torch.tensor([episode.context], device=device)
        logits = reference(input_ids=ids).logits[0].float()
        for start, tokens, log_probs in episode.turns:
            if len(log_probs) != len(tokens):
                return float("inf")  # an engine that does not return one log-prob per token
            at = torch.arange(start - 1, start - 1 + len(tokens), device=device)
            want = logits[at].log_softmax(-1).gather(
                1, torch.tensor(tokens, device=device)[:, None])[:, 0]
            got = torch.tensor(log_probs, device=device, dtype=torch.float32)
            worst = max(worst, (want - got).abs().max().item())
    return worst


def count_tokens(episodes: Sequence[Episode]) -> int:
    return sum(len(tokens) for episode in episodes for _, tokens, _ in episode.turns)


def load_models(args: argparse.Namespace) -> tuple[Any, Any | None]:
    """The model (eval mode, on the device) and its tokenizer (None with synthetic prompts)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dtype = DTYPES[args.dtype]
    tokenizer = None
    if args.model and (Path(args.model) / "tokenizer_config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    if args.random_init:
        spec = RANDOM_CONFIGS.get(args.random_init)
        if spec is None:
            spec = json.loads((Path(args.random_init) / "config.json").read_text())
        config = AutoConfig.for_model(**spec)
        torch.manual_seed(0)
        with torch.device(args.device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                                     attn_implementation="sdpa")
        model = model.to(args.device)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype,
                                                     attn_implementation="sdpa").to(args.device)
    return model.eval().requires_grad_(False), tokenizer


class _IdsOnly:
    """What our engine reads of a tokenizer when prompts are token ids and no stop string is set."""

    def __init__(self, eos: int) -> None:
        self.eos_token_id = self.pad_token_id = eos

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        return ""


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def our_policy(model: Any, tokenizer: Any | None, local: Any, seed: int) -> LocalPolicy:
    """`LocalPolicy` as the local job builds it from the profile's `local:` section; end of
    sequence ignored, so every turn is --new-tokens long."""
    config_eos = model.config.eos_token_id
    eos = int(config_eos if isinstance(config_eos, int) else (config_eos or [0])[0])
    policy = LocalPolicy(model, tokenizer or _IdsOnly(eos), local, seed=seed)
    policy._eos = frozenset()
    return policy


def library_engines(engines: dict[str, Any], args: argparse.Namespace, reference: Any,
                    library_model: Any, max_context: int, first: int) -> list[Any]:
    """Add a started manager per library variant to `engines` ("cb-<variant>", "cb-tw"); the
    managers, to stop. A variant that cannot start is reported and left out."""
    managers = []
    for variant in args.cb_graphs.split(","):
        try:
            manager = cb_manager(library_model, args, variant, max_context, first)
        except Exception as error:  # noqa: BLE001 - a variant that cannot start is reported
            print(f"transformers CB [{variant}]: could not start: {type(error).__name__}: {error}")
            continue
        managers.append(manager)
        engines[f"cb-{variant}"] = lambda work, manager=manager: run_cb(manager, work)
    if args.cb_transposed:
        from evolving_rl.local.engine.linear_layout import use_transposed_weights

        use_transposed_weights(transposed_model := copy.deepcopy(reference))
        with torch.inference_mode():  # the loop thread inherits it: the layout's decode path
            managers.append(manager := cb_manager(transposed_model, args, "auto", max_context,
                                                  first))
        engines["cb-tw"] = lambda work, manager=manager: run_cb(manager, work)
    return managers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="HF folder (weights and tokenizer); default: the "
                        "profile's `local.model` (converted on first use, as the local job does)")
    parser.add_argument("--config", help="the profile whose `local:` builds our policy "
                        "(default: configs/local_cpu.yaml on cpu, local_gpu_qwen.yaml on cuda)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                        help="default: float32 on cpu, bfloat16 on cuda")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--observation-tokens", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="no further timed round once this many seconds have passed since "
                        "the start (0: all rounds); at least one round is always timed")
    parser.add_argument("--random-init", metavar="CONFIG_NAME_OR_DIR",
                        help=f"random weights from a config: {', '.join(RANDOM_CONFIGS)} or a "
                        "folder with config.json")
    parser.add_argument("--cb-page-size", type=int, default=32,
                        help="tokens per page of the library's paged cache (its default: 256)")
    parser.add_argument("--cb-transposed", action="store_true",
                        help="also the library on a model whose linear layers decode with our "
                        "CPU weight layout (evolving_rl.local.engine.linear_layout), its loop in "
                        "inference mode: how much of a CPU gap that layout explains")
    parser.add_argument("--cb-graphs", default="auto",
                        help="comma-separated library variants: auto, on, off (CUDA graphs)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_with_tiny(parser, argv, TINY)
    if not set(args.cb_graphs.split(",")) <= {"auto", "on", "off"}:
        parser.error(f"--cb-graphs takes auto, on, off: {args.cb_graphs!r}")
    logging.basicConfig(level=logging.WARNING)
    cuda = torch.device(args.device).type == "cuda"
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    cfg = load_config(args.config or ("configs/local_gpu_qwen.yaml" if cuda
                                      else "configs/local_cpu.yaml"))
    local = cfg.local
    torch.set_num_threads(local.torch_threads)
    if args.model is None and not args.random_init:
        args.model = str(resolve_model_path(local.model, local.models_dir))
    model, tokenizer = load_models(args)
    reference = copy.deepcopy(model)  # never touched by either engine
    library_model = copy.deepcopy(model)
    vocab = model.config.vocab_size
    policy = our_policy(model, tokenizer, local, args.seed)
    first = max(len(p) for p in workload(tokenizer, vocab, args, -1).prompts)
    max_context = first + args.turns * (args.new_tokens + args.observation_tokens)
    weights = "random weights" if args.random_init else "weights"
    print(f"model {args.random_init or args.model} ({weights}), {args.device} {args.dtype}, "
          f"{torch.get_num_threads()} torch threads; ours: "
          f"{'static' if policy.static else 'dynamic'} decoder, max batch {policy.max_batch}, "
          f"prefix entries {local.prefix_cache_entries}; workload: {args.episodes} episodes x "
          f"{args.turns} turns x {args.new_tokens} new tokens, first prompt {first} tokens, "
          f"observations {args.observation_tokens} tokens, context up to {max_context}", flush=True)
    engines: dict[str, Any] = {"ours": lambda work: run_ours(policy, work)}
    managers = library_engines(engines, args, reference, library_model, max_context, first)
    try:
        return report(args, engines, tokenizer, vocab, reference)
    finally:
        asyncio.run(policy.close())
        for manager in managers:
            manager.stop(block=True, timeout=10)


def _attempt(engines: dict[str, Any], name: str, work: Workload, label: str) -> Any:
    """`engines[name](work)`; a library variant that raises is reported and dropped (None)."""
    try:
        return engines[name](work)
    except Exception as error:  # noqa: BLE001 - a failing library variant is reported
        if name == "ours":
            raise
        print(f"{label} {name}: failed: {type(error).__name__}: {error}; dropped")
        del engines[name]
        return None


def time_rounds(args: argparse.Namespace, engines: dict[str, Any], tokenizer: Any, vocab: int,
                reference: Any) -> tuple[dict[str, list[float]], dict[str, float]] | None:
    """One untimed round per engine, then the timed rounds: (walls, max log-prob error) per
    engine still running; None when an engine did not return the workload's token count."""
    tokens = args.episodes * args.turns * args.new_tokens
    for name in list(engines):  # untimed: graph capture, warm-up
        started = time.perf_counter()
        if _attempt(engines, name, workload(tokenizer, vocab, args, 0), "untimed") is not None:
            print(f"{name:8s} untimed first round: {time.perf_counter() - started:.1f}s",
                  flush=True)
    walls: dict[str, list[float]] = {name: [] for name in engines}
    errors: dict[str, float] = dict.fromkeys(engines, 0.0)
    for rnd in range(1, args.rounds + 1):
        if rnd > 1 and args.budget_s and time.perf_counter() - STARTED > args.budget_s:
            print(f"time budget of {args.budget_s:.0f}s spent: {rnd - 1} timed rounds")
            args.rounds = rnd - 1
            break
        for name in list(engines) if rnd % 2 else list(reversed(engines)):
            result = _attempt(engines, name, workload(tokenizer, vocab, args, rnd), f"round {rnd}")
            if result is None:
                del walls[name]
                continue
            episodes, wall = result
            if count_tokens(episodes) != tokens:
                print(f"{name}: {count_tokens(episodes)} new tokens, expected {tokens}")
                return None
            walls[name].append(wall)
            errors[name] = max(errors[name], logprob_error(reference, episodes, args.device))
            print(f"round {rnd} {name:8s}: {tokens} new tokens in {wall:.2f}s = "
                  f"{tokens / wall:.1f} tok/s; max |log-prob - reference| "
                  f"{errors[name]:.2e}", flush=True)
    return walls, errors


def report(args: argparse.Namespace, engines: dict[str, Any], tokenizer: Any, vocab: int,
           reference: Any) -> int:
    """Time the engines, print the summary line; 1 when an engine did the wrong work."""
    timed = time_rounds(args, engines, tokenizer, vocab, reference)
    if timed is None:
        return 1
    walls, errors = timed
    tokens = args.episodes * args.turns * args.new_tokens
    ours = tokens / median(walls["ours"])
    tolerance = 1e-3 if args.dtype == "float32" else 0.1
    parts = [f"ours {ours:.1f} tok/s (max |dlogp| {errors['ours']:.1e})"]
    for name in walls:
        if name == "ours":
            continue
        rate = tokens / median(walls[name])
        # paired: each round's library wall against ours in the same round (adjacent in time, so
        # a load change on a shared machine moves both)
        paired = median([a / b for a, b in zip(walls["ours"], walls[name], strict=True)])
        exact = errors[name] <= max(2 * errors["ours"], tolerance)
        qualifies = exact and paired * RATIO_RULE >= 1
        parts.append(f"{name} {rate:.1f} tok/s (max |dlogp| {errors[name]:.1e}), {name}/ours "
                     f"{rate / ours:.2f}x (paired per round {paired:.2f}x), qualifies "
                     f"{'yes' if qualifies else 'no'}")
    print(f"SUMMARY {args.device} {args.dtype} {args.random_init or Path(args.model).name}, "
          f"{args.episodes} episodes x {args.turns} turns x {args.new_tokens} tokens, median of "
          f"{args.rounds} rounds: " + "; ".join(parts) + " (rule: the library within "
          f"{RATIO_RULE}x of ours, paired, with log-probs as exact as ours -> use the library)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
