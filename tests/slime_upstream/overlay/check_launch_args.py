"""Both train scripts' exact `ray job submit` argument lists through slime's real `parse_args` at
the pin (slime/utils/arguments.py:1600-1643): SGLang's parser, Megatron-LM's parser with slime's
arguments, then `slime_validate_args`, Megatron's `validate_args` (through slime's wrapper,
slime/backends/megatron_utils/arguments.py) and `sglang_validate_args`.

Megatron's parser ignores unknown flags (`ignore_unknown_args=True`, slime/backends/megatron_utils/
arguments.py:195) and SGLang's parses known ones only, so "every flag is declared" is checked
against the option strings of every parser that ran (`slime_parse` in this folder's conftest,
which also names the one stand-in: the GPU-architecture probe). Then our hooks' own
`check_slime_args` accepts the args slime made, with the script's config.
"""

from __future__ import annotations

import shutil
from argparse import Namespace
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, slime_parse

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.recipe import DEFAULT_MODEL, PROFILES, Step, plan
from evolving_rl.slime_bridge.settings import HOOK_PATHS, check_slime_args


def _flags(argv: list[str]) -> list[str]:
    return [token for token in argv if token.startswith("--")]


@pytest.fixture(scope="module")
def parsed(launch) -> tuple[Path, list[str], Namespace, set[str], list[str]]:
    """(script, argv, slime's args, every declared option string, the validators that ran)."""
    script, argv = launch
    return (script, argv, *slime_parse(argv))


def test_slime_parses_and_all_three_validators_accept_the_command_line(parsed):
    _, _, _, _, ran = parsed
    assert ran == ["slime_validate_args", "_megatron_validate_args", "sglang_validate_args"]


def test_every_flag_is_declared_by_a_parser(parsed):
    _, argv, _, declared, _ = parsed
    assert len(_flags(argv)) > 70
    assert sorted(set(_flags(argv)) - declared) == []


def test_slime_reads_the_values_the_script_gives(parsed):
    script, argv, args, _, _ = parsed
    for flag in ("--rollout-batch-size", "--num-rollout", "--save-interval", "--eval-interval",
                 "--tensor-model-parallel-size", "--max-tokens-per-gpu"):
        assert getattr(args, flag[2:].replace("-", "_")) == int(argv[argv.index(flag) + 1])
    for flag in ("--rollout-top-p", "--entropy-coef", "--lr", "--eps-clip",
                 "--sglang-mem-fraction-static"):
        assert getattr(args, flag[2:].replace("-", "_")) == float(argv[argv.index(flag) + 1])
    for key, path in HOOK_PATHS.items():
        assert getattr(args, key) == path
    assert args.loss_type == "custom_loss" and args.use_dynamic_batch_size
    assert args.global_batch_size == args.rollout_batch_size  # one optimiser step per rollout
    assert args.eval_function_path == HOOK_PATHS["rollout_function_path"]  # slime's default
    assert args.kl_loss_coef == 0.0  # not given: slime's own loss alone reads it (args.py)


def test_our_hooks_accept_the_args_slime_made(parsed):
    _, argv, args, _, _ = parsed
    custom = yaml.safe_load(Path(argv[argv.index("--custom-config-path") + 1]).read_text())
    assert args.evolving_rl_config == custom["evolving_rl_config"]  # slime set our key
    check_slime_args(args, load_config(args.evolving_rl_config))


ONE_GPU_CONFIG = ROOT / "configs/alfworld_1gpu.yaml"
# Set here to the test's own folders and sources; the rest of the recipe's launch is as written.
OWN_PATHS = {"MODEL_DIR", "REF_DIR", "CONFIG", "RUN_DIR", "SLIME_DIR", "MEGATRON_DIR"}


def one_gpu_launch() -> Step:
    """The one-GPU profile's launch as the recipe runs it (src/evolving_rl/slime_bridge/recipe.py,
    profile alfworld; run for real on an H200)."""
    [launch] = [step for step in plan(PROFILES["alfworld"]) if step.name == "launch"]
    return launch


def one_gpu_environment() -> dict[str, str]:
    """The launch's environment, less the paths this test sets itself."""
    env = one_gpu_launch().env
    assert {"NUM_GPUS", "TP_SIZE", "MODEL_ARGS_NAME"} <= set(env)
    return {name: value for name, value in env.items() if name not in OWN_PATHS}


def one_gpu_training_flags() -> tuple[str, ...]:
    """The flags the recipe gives the training launch."""
    flags = one_gpu_launch().command[2:]
    assert flags[0].startswith("--") and "--spec" in flags, flags
    return tuple(flags)


@pytest.fixture(scope="module", params=[("--debug-rollout-only",), one_gpu_training_flags()],
                ids=["rollout-only", "training"])
def one_gpu(request, pins, tmp_path_factory):
    """(extra args, argv, slime's args, validators run) of the one-GPU profile."""
    from conftest import submitted_argv

    slime, megatron = pins
    folder = tmp_path_factory.mktemp("one_gpu")
    model = folder / "qwen2.5-coder-0.5b-instruct"  # the conversion's config.json; also REF_DIR,
    model.mkdir()  # as the recipe loads the HF folder (no torch_dist conversion)
    shutil.copy(ROOT / DEFAULT_MODEL.config, model / "config.json")
    values = yaml.safe_load(ONE_GPU_CONFIG.read_text())
    values["retrieval"]["cache_path"] = str(folder / "cache.npz")  # checked, not read
    (folder / "cache.npz").write_text("")
    config = folder / "alfworld_1gpu.yaml"
    config.write_text(yaml.safe_dump(values))
    environment = one_gpu_environment()
    prepared = folder / "prepared"  # the splits the launch names (valid_small: alfworld.subsets)
    prepared.mkdir()
    for split in ("train_seen", *environment["EVAL_SPLITS"].split()):  # TRAIN_SPLIT's default
        (prepared / f"{split}.jsonl").write_text("")
    argv = submitted_argv(ROOT / "scripts/alfworld/train_alfworld.sh", folder, slime, megatron,
                          config=config, prepared=prepared,
                          overrides={**environment, "MODEL_DIR": str(model),
                                     "REF_DIR": str(model)}, args=request.param)
    args, _, ran = slime_parse(argv)
    return request.param, argv, args, ran


def test_the_one_gpu_profile_passes_slimes_validators_and_our_hooks(one_gpu):
    extra, argv, args, ran = one_gpu
    rollout_only = extra == ("--debug-rollout-only",)
    # slime skips Megatron's validation (and its HF config check) under --debug-rollout-only
    # (slime/utils/arguments.py:1637); training runs all three
    assert ran == (["slime_validate_args", "sglang_validate_args"] if rollout_only else
                   ["slime_validate_args", "_megatron_validate_args", "sglang_validate_args"])
    assert (args.rollout_num_gpus, args.rollout_num_gpus_per_engine,
            args.tensor_model_parallel_size) == (1, 1, 1)
    assert args.rollout_batch_size == args.global_batch_size == 2
    assert args.rollout_top_p == 1.0
    # rollout-only: slime turns colocation and offloading off (slime/utils/arguments.py:1919-1930);
    # training stays colocated without offloading, as the recipe's flags ask (:1938-1957)
    assert args.colocate is not rollout_only
    assert (args.offload_train, args.offload_rollout) == (False, False)
    if not rollout_only:  # the TE-free spec (src/evolving_rl/slime_bridge/megatron_spec.py)
        assert (args.transformer_impl, args.spec) == (
            "local", ["evolving_rl.slime_bridge.megatron_spec", "layer_spec"])
        assert args.no_persist_layer_norm
        assert not (args.gradient_accumulation_fusion or args.apply_rope_fusion)
    check_slime_args(args, load_config(args.evolving_rl_config))
