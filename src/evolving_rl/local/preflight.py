"""Checks the local main job runs before it writes or moves anything (`preflight`).

Owns what a mistake would otherwise cost a run, found before an earlier run is moved aside:

- ports: every server port the job will bind (the retrieval server's and the environment's: its
  services module's `ports(cfg)` when it has one, else every `*port` field of its config
  section) must be free;
- devices: `local.device` and `retrieval.device` must be torch devices this machine has
  (`device_problem`): `cpu`, or an accelerator of `ACCELERATORS` (`cuda`, `mps`, `xpu`, with an
  optional index) that this torch is built for and sees, index N among those it sees; any other
  type torch knows (`meta`, `hpu`, `xla`, ...) is refused, as the job places models with
  `.to(device)` on these only. The evaluation checks its `--device` with the same rule. Their
  dtypes are not checked: float32 and bfloat16 both run on the CPU and on every GPU torch
  supports (bfloat16 natively from compute capability 8.0, emulated before);
- models: `local.model` is one of `GGUF_MODELS` whose converted folder exists or whose GGUF file
  can be found (else the fetch hint of `GgufModel.gguf_path`), `tiny-char` with
  `local.random_init` (it has no weights), or an HF folder (config.json);
  `local.resume_from` is a complete checkpoint folder (`local.checkpoints.incomplete_reason`:
  weights and trainer state whole); `retrieval.model` resolves
  (`retrieval.encoder.resolve_model`);
- folder: `run.output_dir` is a folder (or not there yet) that can be written (or made: its
  nearest existing ancestor) and that no running job holds
  (`local.run_lock`: the job takes the lock itself right after these checks);
- disk: the filesystem of `run.output_dir` has room for the checkpoints the run will write,
  estimated from the parameter count in the safetensors headers of the folder the weights start
  from (`checkpoint_bytes`), and the file-size limit (`ulimit -f`, `RLIMIT_FSIZE`) lets its
  largest file be written; skipped when no such folder exists yet (a GGUF model converted on
  first use) or it holds no safetensors file.

GPU memory is not checked: beyond the weights, what a run needs (the KV cache of
`local.max_batch_generate` rows, activations, the allocator's fragmentation) is only known by
running it (`benchmarks/model_fit.py` measures it), and reading the free memory would initialise
CUDA in the job's process before its data stage starts workers.

Each failure is one line naming the config key and, where one value fixes it, the `--set` to
use; all failures are reported together in one `ConfigError`, so one attempt shows every mistake.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import torch

from env.launch import free_port_block, port_taken
from evolving_rl.config import ConfigError
from evolving_rl.config.schema import Config, LocalConfig
from evolving_rl.local.checkpoints import incomplete_reason
from evolving_rl.local.model import DTYPES, GGUF_MODELS
from evolving_rl.local.run_lock import busy_problem
from evolving_rl.local.tiny_model import TINY_CHAR
from evolving_rl.retrieval.encoder import ModelLoadError, resolve_model

# config key -> (host, first port, how many consecutive ports from it)
PortMap = Mapping[str, tuple[str, int, int]]


def config_ports(cfg: Config, services: ModuleType) -> dict[str, tuple[str, int, int]]:
    """Every port the job's servers bind, by config key (module docstring)."""
    ports = {"retrieval.port": (cfg.retrieval.host, cfg.retrieval.port, 1)}
    own = getattr(services, "ports", None)
    if own is not None:
        return {**ports, **own(cfg)}
    section = getattr(cfg, cfg.environment)
    for item in dataclasses.fields(section):
        if item.name.endswith("port"):
            ports[f"{cfg.environment}.{item.name}"] = (section.host, getattr(section, item.name), 1)
    return ports


def port_problems(ports: PortMap) -> list[str]:
    """One line per key with a port in use, naming a free one to `--set` instead."""
    problems = []
    wanted = {port + i for _host, port, count in ports.values() for i in range(count)}
    for key, (host, port, count) in ports.items():
        taken = [p for p in range(port, port + count) if port_taken(p, host)]
        if taken:
            spare = free_port_block(count, host, exclude=wanted)
            problems.append(f"{key}: port {taken[0]} on {host} is in use (another server, "
                            f"perhaps another run's); stop it, or choose another port: "
                            f"--set {key}={spare}")
    return problems


# device type -> its name in messages; torch.<type> has is_available() and device_count()
ACCELERATORS = {"cuda": "CUDA", "mps": "MPS", "xpu": "XPU"}


def device_unusable(device: str) -> tuple[str, str] | None:
    """(why torch cannot put a model on `device` here, a value that works instead), or None
    when it can (module docstring)."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        return f"{device!r} is not a torch device (cpu, cuda, cuda:N, mps, xpu)", "cpu"
    if parsed.type == "cpu":
        return None
    name = ACCELERATORS.get(parsed.type)
    if name is None:
        return (f"{device!r}: device type {parsed.type!r} is not one the job runs on "
                f"(cpu, {', '.join(ACCELERATORS)})"), "cpu"
    backend = getattr(torch, parsed.type)
    if not backend.is_available():
        why = ("this torch is built without CUDA" if name == "CUDA" and torch.version.cuda is None
               else f"no {name} device is visible")
        return f"{device!r} but {why} (torch {torch.__version__})", "cpu"
    count = backend.device_count()
    if parsed.index is not None and parsed.index >= count:
        return (f"{device!r} but only {count} {name} device(s) are visible",
                f"{parsed.type}:0")
    return None


def device_problem(key: str, device: str, option: str | None = None) -> str | None:
    """Why torch cannot put a model on `device` here, naming `key` and the value to give
    instead, as `option` (default `--set <key>=`); None when it can."""
    found = device_unusable(device)
    if found is None:
        return None
    why, value = found
    return f"{key}: {why}; {option if option is not None else f'--set {key}='}{value}"


def device_problems(cfg: Config) -> list[str]:
    """`local.device` and `retrieval.device` (module docstring)."""
    found = (device_problem("local.device", cfg.local.device),
             device_problem("retrieval.device", cfg.retrieval.device))
    return [problem for problem in found if problem]


def _has_config(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def model_problems(cfg: Config) -> list[str]:
    """`local.model`, `local.resume_from` and `retrieval.model` (module docstring)."""
    local = cfg.local
    problems = []
    incomplete = (incomplete_reason(Path(local.resume_from), trainer_state=True)
                  if local.resume_from else None)
    if incomplete:
        problems.append(f"local.resume_from: no checkpoint to resume from in "
                        f"{local.resume_from} ({incomplete}); give a complete one")
    spec = GGUF_MODELS.get(local.model)
    if local.model == TINY_CHAR and not local.random_init:
        problems.append(f"local.model: {TINY_CHAR!r} has no weights; build it at random with "
                        "--set local.random_init=true")
    elif spec is None and local.model != TINY_CHAR and not _has_config(Path(local.model)):
        problems.append(f"local.model: {local.model!r} is neither one of "
                        f"{sorted(GGUF_MODELS)}, {TINY_CHAR!r} nor an HF model folder "
                        "(config.json)")
    elif spec is not None and not _has_config(Path(local.models_dir) / spec.folder):
        try:
            spec.gguf_path(Path(local.models_dir))
        except FileNotFoundError as err:
            problems.append(f"local.model: {local.model!r} is not converted yet (no "
                            f"{Path(local.models_dir) / spec.folder}) and its GGUF file is "
                            f"missing: {err}")
    try:
        resolve_model(cfg.retrieval.model)
    except ModelLoadError as err:
        problems.append(f"retrieval.model: {err}")
    return problems


def weights_folder(local: LocalConfig) -> Path | None:
    """The HF folder the trained weights are loaded from, when it exists already."""
    spec = GGUF_MODELS.get(local.model)
    model = Path(local.models_dir) / spec.folder if spec else Path(local.model)
    folder = Path(local.resume_from) if local.resume_from else model
    return folder if _has_config(folder) else None


def parameter_count(folder: Path) -> int | None:
    """The parameters stored in `folder`'s safetensors files (from their headers), or None."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        total += sum(math.prod(tensor["shape"]) for name, tensor in header.items()
                     if name != "__metadata__")
    return total


def checkpoint_bytes(params: int, local: LocalConfig) -> tuple[int, int]:
    """(weights, trainer state) bytes of one checkpoint of a `params`-parameter model: the
    weights in `local.dtype`; with `local.save_trainer_state`, AdamW's two moments, in float32
    with the float32 master weights also saved (`local.optimizer_device` cpu, or
    `local.master_weights` with a bfloat16 model), else in the model's dtype."""
    width = DTYPES[local.dtype].itemsize
    if not local.save_trainer_state:
        return params * width, 0
    masters = local.optimizer_device == "cpu" or (local.master_weights
                                                   and local.dtype != "float32")
    return params * width, params * (4 + 2 * 4 if masters else 2 * width)


def checkpoint_count(local: LocalConfig) -> int:
    """Checkpoints a fresh run writes: every `checkpoint_every` steps, and the final one."""
    every, steps = local.checkpoint_every, local.train_steps
    return len(set(range(every, steps + 1, every)) | {steps}) if every else 1


def _size(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 10**8 else f"{size / 1e6:.2f} MB"


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    return existing


def file_size_problems(weights: int, state: int) -> list[str]:
    """A checkpoint file (`weights`, `state` bytes) larger than the file-size limit."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY or limit >= max(weights, state):
        return []
    lighter = ", or --set local.save_trainer_state=false" if weights <= limit else ""
    return [f"run.output_dir: a checkpoint writes a file of about {_size(max(weights, state))} "
            f"but the file-size limit (ulimit -f) is {_size(limit)}: the run would lose its "
            f"steps at the save; raise it (ulimit -f unlimited){lighter}"]


def disk_problems(cfg: Config) -> list[str]:
    """The checkpoints' estimated size against the free space of `run.output_dir`, and their
    largest file against the file-size limit (`ulimit -f`)."""
    folder = weights_folder(cfg.local)
    params = parameter_count(folder) if folder else None
    if params is None:
        return []
    weights, state = checkpoint_bytes(params, cfg.local)
    problems = file_size_problems(weights, state)
    count = checkpoint_count(cfg.local)
    need = count * (weights + state)
    existing = _existing(Path(cfg.run.output_dir))
    free = shutil.disk_usage(existing).free
    if free >= need:
        return problems
    lighter = " or --set local.save_trainer_state=false," if state else ""
    return problems + [f"run.output_dir: {count} checkpoint(s) of {params:,} parameters need about "
            f"{_size(need)} (weights {_size(weights)} + trainer state {_size(state)} each) but "
            f"{existing} has {_size(free)} free; free space,{lighter} or --set "
            f"run.output_dir=<a folder on a larger disk>"]


def path_problems(cfg: Config) -> list[str]:
    """`run.output_dir` must be a folder, if it exists, that can be written (or be made in a
    folder that can) and that no running job holds (`local.run_lock`)."""
    run_dir = Path(cfg.run.output_dir)
    if run_dir.exists() and not run_dir.is_dir():
        return [f"run.output_dir: {run_dir} is a file, not a folder"]
    existing = _existing(run_dir)
    if (not os.access(existing, os.W_OK | os.X_OK)
            or os.statvfs(existing).f_flag & os.ST_RDONLY):
        return [f"run.output_dir: {existing} is not writable (read-only, or not yours); "
                "--set run.output_dir=<a folder you can write>"]
    busy = busy_problem(run_dir)
    return [busy] if busy else []


def preflight(cfg: Config, services: ModuleType) -> None:
    """Raise one `ConfigError` listing every problem above; nothing was written or started."""
    problems = (device_problems(cfg) + model_problems(cfg) + path_problems(cfg)
                + disk_problems(cfg) + port_problems(config_ports(cfg, services)))
    if problems:
        raise ConfigError("", "the run did not start; nothing was written or moved:\n  "
                          + "\n  ".join(problems))
