"""Model-fit benchmark: does a Qwen2.5-3B or -7B train on one GPU with a profile's settings?

    PYTHONPATH=. .venv/bin/python -m benchmarks.model_fit [--config configs/local_gpu_qwen.yaml]
        [--shapes 3b,7b] [--configurations profile,offload] [--prompt-tokens 1500]
        [--new-tokens 32] [--micro-batches 3] [--sample-tokens 2000] [--train-steps 2]
        [--set KEY=VALUE ...] [--out model_fit.json] [--tiny]

Per model shape (Qwen2.5-3B-Instruct and -7B-Instruct as published: `SHAPES`, random weights,
nothing downloaded) and per configuration (`CONFIGURATIONS`: the profile as it is; `offload`,
`local.optimizer_device=cpu`; `offload-32`, that with 32 KV slots), one after another in one
process, each from an empty device:
- build: what `local.job.load_models` builds, on `local.device` in `local.dtype` — the policy
  model (random weights of the shape, seed `run.seed`, built on the device), its frozen copy as
  the reference when a KL coefficient is > 0, the `GRPOTrainer` with the profile's `local`
  settings, the `LocalPolicy` with `local.max_batch_generate` static KV slots of
  `local.static_cache_tokens` tokens;
- generation: `max_batch_generate` prompts of `--prompt-tokens` random ids decoded together
  (`generate_batch`: one prefill admits them all, the largest admission the profile allows),
  `--new-tokens` each at the solver's sampling;
- train steps: `--train-steps` `GRPOTrainer.step`s on `micro_batch_size` x `--micro-batches`
  synthetic samples of `--sample-tokens` tokens, half solver episodes (turns of 32 model tokens,
  each followed by a 96-token observation outside the loss mask), half extractions (a skill of a
  quarter of the length after its prompt, all in the loss mask). The first step also allocates
  AdamW's moments (and faults in their pages: on the CPU with `offload`, the slow part), so the
  second is the one a run repeats.
After each phase: its seconds, device memory allocated and reserved now and at the peak since
the configuration began, and the process's resident set (GB = 1e9 bytes). Beside them, what
each part holds computed from tensor sizes: weights, reference, float32 masters and AdamW's two
moments (on the device or the CPU), the model's gradients (all alive after the backward), the
KV slots. A configuration that runs out of device memory is "does not fit", with the phase and
the memory at the failure; everything is freed and the next one runs (a host out of memory is
not caught: the kernel ends the process). One result line per (shape, configuration); `--out`
writes every number as JSON. Exit status 1 when some shape fits in no configuration. Single
runs: the seconds show the order of magnitude, they are not timing claims.
`--tiny` (the test suite's smoke run): a 2-layer Qwen2 of hidden size 64 on the CPU with the
static decoder (eager), 4 slots of 256 tokens, 2 x 2 samples of 64 tokens, one train step; the
same code path.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil
import torch

from benchmarks.cli import parse_with_tiny
from evolving_rl.clients.policy import SamplingParams
from evolving_rl.config import load_config
from evolving_rl.config.schema import Config
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import DTYPES
from evolving_rl.local.trainer import GRPOTrainer

GB = 1e9
QWEN25 = {"max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
          "hidden_act": "silu", "use_sliding_window": False, "bos_token_id": 151643,
          "eos_token_id": 151645, "pad_token_id": 151643}
# config.json of Qwen/Qwen2.5-3B-Instruct and Qwen/Qwen2.5-7B-Instruct (the sizes that count).
SHAPES: dict[str, dict[str, Any]] = {
    "3b": {**QWEN25, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
           "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
           "tie_word_embeddings": True},
    "7b": {**QWEN25, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
           "tie_word_embeddings": False},
    "tiny": {**QWEN25, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
             "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1,
             "pad_token_id": 0},
}
CONFIGURATIONS: dict[str, tuple[str, ...]] = {
    "profile": (),
    "offload": ("local.optimizer_device=cpu",),
    "offload-32": ("local.optimizer_device=cpu", "local.max_batch_generate=32"),
}
TURN_TOKENS, OBSERVATION_TOKENS = 32, 96  # a solver turn: its reply, then the next observation
KV_ROUNDING = 128  # the static engine rounds a slot's capacity up to its smallest KV window
TINY = {"shapes": "tiny", "prompt_tokens": 48, "new_tokens": 4, "micro_batches": 2,
        "sample_tokens": 64, "train_steps": 1,
        "overrides": ["local.device=cpu", "local.decode_backend=static",
                      "local.max_batch_generate=4", "local.static_cache_tokens=256",
                      "local.micro_batch_size=2", "local.torch_threads=1"]}

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IdTokenizer:
    """What the policy reads of a tokenizer when prompts are ids and no stop string is set."""

    pad_token_id: int
    eos_token_id: int


@dataclass(frozen=True)
class Holdings:
    """What each part holds (GB), from tensor sizes: masters and AdamW on `optimizer_device`,
    the rest on `device`."""

    weights_gb: float
    reference_gb: float
    masters_gb: float
    adamw_gb: float
    gradients_gb: float
    kv_slots_gb: float
    device: str
    optimizer_device: str

    def on_device_gb(self) -> float:
        optimizer = (self.masters_gb + self.adamw_gb
                     if self.optimizer_device == self.device else 0.0)
        return (self.weights_gb + self.reference_gb + self.gradients_gb + self.kv_slots_gb
                + optimizer)


@dataclass
class Phase:
    """One phase of a configuration: seconds, what it did, memory after it (GB; device memory
    None on a CPU)."""

    name: str
    seconds: float
    detail: dict[str, Any]
    memory: dict[str, float | None]


@dataclass
class Outcome:
    """One (shape, configuration): its phases, or the phase that ran out of device memory."""

    shape: str
    configuration: str
    overrides: list[str]
    fits: bool = False
    failed_phase: str | None = None
    error: str | None = None
    memory_at_failure: dict[str, float | None] = field(default_factory=dict)
    holdings: Holdings | None = None
    phases: list[Phase] = field(default_factory=list)


def memory(device: torch.device) -> dict[str, float | None]:
    """Device memory now and at its peak since the last reset, and the resident set (GB)."""
    rss = psutil.Process().memory_info().rss / GB
    if device.type != "cuda":
        return {"allocated_gb": None, "peak_allocated_gb": None, "reserved_gb": None,
                "peak_reserved_gb": None, "rss_gb": rss}
    return {"allocated_gb": torch.cuda.memory_allocated(device) / GB,
            "peak_allocated_gb": torch.cuda.max_memory_allocated(device) / GB,
            "reserved_gb": torch.cuda.memory_reserved(device) / GB,
            "peak_reserved_gb": torch.cuda.max_memory_reserved(device) / GB, "rss_gb": rss}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Run:
    """The live objects of one configuration (dropped whole when it ends)."""

    cfg: Config
    device: torch.device
    trainer: GRPOTrainer
    policy: LocalPolicy
    vocab: int


def build(shape: dict[str, Any], cfg: Config) -> Run:
    """Policy model, reference, trainer and policy as `local.job.load_models` makes them, the
    model with random weights built directly on the device (module docstring)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    local, device = cfg.local, torch.device(cfg.local.device)
    torch.manual_seed(cfg.run.seed)
    with device:
        model = AutoModelForCausalLM.from_config(Qwen2Config(**shape), dtype=DTYPES[local.dtype])
    model.eval()
    uses_kl = cfg.loss.kl_coef.solver > 0 or cfg.loss.kl_coef.extractor > 0
    ref = copy.deepcopy(model).requires_grad_(False) if uses_kl else None
    tokenizer = IdTokenizer(shape["pad_token_id"], shape["eos_token_id"])
    trainer = GRPOTrainer(model, ref, cfg.loss, local, tokenizer.pad_token_id)
    policy = LocalPolicy(model, tokenizer, local, seed=cfg.run.seed)
    return Run(cfg, device, trainer, policy, shape["vocab_size"])


def _bytes(tensors: Iterator[torch.Tensor] | list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def kv_slot_bytes(model: torch.nn.Module, local: Any) -> int:
    """Keys and values of every layer in `max_batch_generate` slots (the static engine's)."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads)
    capacity = -(-local.static_cache_tokens // KV_ROUNDING) * KV_ROUNDING
    element = next(model.parameters()).element_size()
    return (2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * capacity
            * local.max_batch_generate * element)


def holdings(run: Run) -> Holdings:
    trainer, local = run.trainer, run.cfg.local
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    masters = trainer.masters.masters if trainer.masters is not None else []
    return Holdings(
        weights_gb=_bytes(trainer.model.parameters()) / GB,
        reference_gb=_bytes(trainer.ref_model.parameters()) / GB if trainer.ref_model else 0.0,
        masters_gb=_bytes(masters) / GB, adamw_gb=2 * _bytes(trainer.optimized) / GB,
        gradients_gb=_bytes(trainable) / GB, kv_slots_gb=kv_slot_bytes(trainer.model, local) / GB,
        device=str(run.device),
        optimizer_device="cpu" if local.optimizer_device == "cpu" else str(run.device))


def random_ids(generator: torch.Generator, vocab: int, length: int) -> list[int]:
    return torch.randint(3, vocab, (length,), generator=generator).tolist()


def generate(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    """`max_batch_generate` prompts decoded together through the policy's static slots."""
    generator = torch.Generator().manual_seed(run.cfg.run.seed)
    rows = run.cfg.local.max_batch_generate
    prompts = [random_ids(generator, run.vocab, args.prompt_tokens) for _ in range(rows)]
    sampling = SamplingParams.from_config(run.cfg.sampling.solver).capped(args.new_tokens)
    out = run.policy.generate_batch(prompts, [sampling] * rows)
    return {"rows": rows, "prompt_tokens": args.prompt_tokens,
            "new_tokens": sum(len(g.token_ids) for g in out)}


def train_samples(n: int, length: int, vocab: int, seed: int) -> list[TrainSample]:
    """`n` samples of `length` tokens, solver episodes and extractions alternately (module
    docstring)."""
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(n):
        ids = random_ids(generator, vocab, length)
        solver = i % 2 == 0
        split = length // 4 if solver else length - length // 4
        mask = [int(not solver or j % (TURN_TOKENS + OBSERVATION_TOKENS) < TURN_TOKENS)
                for j in range(length - split)]
        samples.append(TrainSample(
            role=Role.SOLVER if solver else Role.EXTRACTOR, prompt_ids=ids[:split],
            response_ids=ids[split:], loss_mask=mask, log_probs=[-2.0 * m for m in mask],
            reward=float(i % 4 < 2), group_id=f"g{i // 4}", advantage=1.0 if i % 4 < 2 else -1.0))
    return samples


def train_step(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    n = run.cfg.local.micro_batch_size * args.micro_batches
    metrics = run.trainer.step(train_samples(n, args.sample_tokens, run.vocab, run.cfg.run.seed))
    run.policy.weights_changed()
    return {"samples": metrics.n_samples, "sequence_tokens": metrics.n_sequence_tokens,
            "trained_tokens": metrics.n_tokens, "loss": metrics.loss,
            "grad_norm": metrics.grad_norm}


@contextmanager
def phase(outcome: Outcome, name: str, device: torch.device) -> Iterator[dict[str, Any]]:
    """Time the block and record it as a `Phase`; the block fills in the yielded detail."""
    detail: dict[str, Any] = {}
    outcome.failed_phase = name
    logger.info("%s %s: %s ...", outcome.shape, outcome.configuration, name)
    started = time.perf_counter()
    yield detail
    synchronize(device)
    outcome.phases.append(Phase(name, time.perf_counter() - started, detail, memory(device)))
    outcome.failed_phase = None


def measure(outcome: Outcome, cfg: Config, args: argparse.Namespace) -> None:
    """Build, generate, train; the live objects die with this frame."""
    device = torch.device(cfg.local.device)
    with phase(outcome, "build", device):
        run = build(SHAPES[outcome.shape], cfg)
    outcome.holdings = holdings(run)
    steps: tuple[tuple[str, Callable[[Run, argparse.Namespace], dict[str, Any]]], ...] = (
        ("generation", generate),
        *((f"train_step_{i}", train_step) for i in range(1, args.train_steps + 1)))
    for name, work in steps:
        with phase(outcome, name, device) as detail:
            detail.update(work(run, args))
    outcome.fits = True


def run_configuration(shape: str, name: str, args: argparse.Namespace) -> Outcome:
    overrides = [*args.overrides, *CONFIGURATIONS[name]]
    cfg = load_config(args.config, overrides)
    outcome = Outcome(shape, name, overrides)
    device = torch.device(cfg.local.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        measure(outcome, cfg, args)
    except torch.OutOfMemoryError as error:
        outcome.error = str(error).splitlines()[0][:400]
        outcome.memory_at_failure = memory(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return outcome


def _gb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _phase_text(phase: Phase) -> str:
    detail = ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                       for key, value in phase.detail.items())
    return (f" {phase.name} {phase.seconds:.1f}s{f' ({detail})' if detail else ''}: peak "
            f"{_gb(phase.memory['peak_allocated_gb'])} GB allocated, "
            f"{_gb(phase.memory['peak_reserved_gb'])} reserved, RSS {phase.memory['rss_gb']:.1f};")


def describe(outcome: Outcome) -> str:
    """The result line of one (shape, configuration)."""
    head = f"{outcome.shape:4s} {outcome.configuration:10s}:"
    parts = ""
    if outcome.holdings is not None:
        h = outcome.holdings
        parts = (f" parts (GB): weights {h.weights_gb:.2f}, reference {h.reference_gb:.2f}, "
                 f"masters {h.masters_gb:.2f} + AdamW {h.adamw_gb:.2f} on {h.optimizer_device}, "
                 f"gradients {h.gradients_gb:.2f}, KV slots {h.kv_slots_gb:.2f}; on the device "
                 f"{h.on_device_gb():.2f} before activations;")
    phases = "".join(_phase_text(p) for p in outcome.phases)
    if outcome.fits:
        return f"{head} fits.{parts}{phases}"
    failure = outcome.memory_at_failure
    return (f"{head} does not fit (out of device memory in {outcome.failed_phase} at "
            f"{_gb(failure.get('allocated_gb'))} GB allocated, peak "
            f"{_gb(failure.get('peak_allocated_gb'))}, reserved "
            f"{_gb(failure.get('reserved_gb'))}).{parts}{phases} {outcome.error}")


def device_line(args: argparse.Namespace) -> str:
    cfg = load_config(args.config, args.overrides)
    device = torch.device(cfg.local.device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        where = f"{props.name}, {props.total_memory / GB:.1f} GB"
    else:
        where = "cpu"
    return (f"model fit: {args.config} on {where}; {cfg.local.dtype}; torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads; {args.prompt_tokens}-token prompts + "
            f"{args.new_tokens} new, train samples of {args.sample_tokens} tokens")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_gpu_qwen.yaml")
    parser.add_argument("--shapes", default="3b,7b", help=f"of {sorted(SHAPES)}")
    parser.add_argument("--configurations", default="profile,offload",
                        help=f"of {sorted(CONFIGURATIONS)}")
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--micro-batches", type=int, default=3)
    parser.add_argument("--sample-tokens", type=int, default=2000)
    parser.add_argument("--train-steps", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="a config override for every configuration")
    parser.add_argument("--out", help="write every number here as JSON")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.set_num_threads(load_config(args.config, args.overrides).local.torch_threads)
    print(device_line(args), flush=True)
    outcomes = []
    for shape in args.shapes.split(","):
        for name in args.configurations.split(","):
            outcomes.append(run_configuration(shape, name, args))
            print(describe(outcomes[-1]), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"header": device_line(args), "results": [asdict(o) for o in outcomes]},
                      handle, indent=2)
    unfit = sorted({o.shape for o in outcomes} - {o.shape for o in outcomes if o.fits})
    if unfit:
        print(f"fits in no configuration: {', '.join(unfit)}")
    return 1 if unfit else 0


if __name__ == "__main__":
    sys.exit(main())
