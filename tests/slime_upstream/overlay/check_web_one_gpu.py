"""configs/web_1gpu.yaml's launch, as the recipe's profile web runs it
(src/evolving_rl/slime_bridge/recipe.py), through slime's real `parse_args` at the pin (all three
validators: slime's, Megatron's through slime's wrapper, SGLang's) and our hooks'
`check_slime_args`: scripts/web/train_web.sh run for real with a stub `ray` (`submitted_argv` in
this folder's conftest) in the profile's environment and with its flags, only the paths (model,
config, prepared splits, run folder, slime and Megatron) this test's own. The model folder holds
Qwen2.5-Coder-0.5B-Instruct's config.json as the GGUF conversion writes it
(scripts/models/qwen2.5_coder_0.5b_config.json), which slime's HF check compares with slime's
scripts/models/qwen2.5-0.5B.sh; as in the recipe, it is also the reference model (REF_DIR).
"""

from __future__ import annotations

import shutil
from argparse import Namespace

import pytest
import yaml
from conftest import ROOT, slime_parse, submitted_argv

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.recipe import PROFILES, plan, resolved
from evolving_rl.slime_bridge.settings import check_slime_args
from tests.profile_data import ProfileCommand, profile_commands

CONFIG = ROOT / "configs/web_1gpu.yaml"
SCRIPT = "scripts/web/train_web.sh"
# Set by this test to its own folders; the rest of the profile's environment is taken as written.
OWN_PATHS = {"MODEL_DIR", "REF_DIR", "CONFIG", "RUN_DIR", "PREPARED_DIR", "SLIME_DIR",
             "MEGATRON_DIR"}


def _launch() -> ProfileCommand:
    [launch] = profile_commands(CONFIG, SCRIPT)
    return launch


@pytest.fixture(scope="module")
def web_one_gpu(pins, tmp_path_factory) -> tuple[list[str], Namespace, set[str], list[str]]:
    """(argv, slime's args, every declared option string, the validators run) of the profile's
    launch."""
    slime, megatron = pins
    folder = tmp_path_factory.mktemp("web_one_gpu")
    model = folder / "qwen2.5-coder-0.5b-instruct"
    model.mkdir()
    shutil.copy(ROOT / "scripts/models/qwen2.5_coder_0.5b_config.json", model / "config.json")
    launch = _launch()
    assert launch.env["REF_DIR"] == launch.env["MODEL_DIR"]
    prepared = folder / "prepared"
    prepared.mkdir()
    for split in ("train", *launch.env["EVAL_SPLITS"].split()):  # train_web.sh's TRAIN_SPLIT
        (prepared / f"{split}.jsonl").write_text("")
    values = yaml.safe_load(CONFIG.read_text())
    values["retrieval"]["cache_path"] = str(folder / "cache.npz")  # checked, not read
    (folder / "cache.npz").write_text("")
    config = folder / "web_1gpu.yaml"
    config.write_text(yaml.safe_dump(values))
    env = {k: v for k, v in launch.env.items() if k not in OWN_PATHS}
    argv = submitted_argv(ROOT / SCRIPT, folder, slime, megatron, config=config,
                          prepared=prepared,
                          overrides={**env, "MODEL_DIR": str(model), "REF_DIR": str(model)},
                          args=tuple(launch.argv[2:]))
    return (argv, *slime_parse(argv))


def test_slime_parses_and_all_three_validators_accept_it(web_one_gpu):
    argv, _, declared, ran = web_one_gpu
    assert ran == ["slime_validate_args", "_megatron_validate_args", "sglang_validate_args"]
    assert sorted({t for t in argv if t.startswith("--")} - declared) == []


def test_one_gpu_colocated_with_the_te_free_spec(web_one_gpu):
    _, args, _, _ = web_one_gpu
    assert (args.rollout_num_gpus, args.rollout_num_gpus_per_engine,
            args.tensor_model_parallel_size) == (1, 1, 1)
    assert args.colocate and (args.offload_train, args.offload_rollout) == (False, False)
    assert (args.transformer_impl, args.spec) == (
        "local", ["evolving_rl.slime_bridge.megatron_spec", "layer_spec"])
    assert args.untie_embeddings_and_output_weights and args.no_persist_layer_norm
    assert not (args.gradient_accumulation_fusion or args.apply_rope_fusion)


def test_two_steps_of_two_source_tasks_a_checkpoint_each_and_an_evaluation(web_one_gpu):
    _, args, _, _ = web_one_gpu
    assert args.rollout_batch_size == args.global_batch_size == 2
    assert (args.num_rollout, args.save_interval, args.eval_interval) == (2, 1, 2)
    assert args.eval_prompt_data[0::2] == ["test_task"]
    assert args.rollout_top_p == 1.0  # the stock sglang-router can run it


def test_the_profile_evaluates_the_checkpoint_the_launch_saves_last(tmp_path):
    """The eval step names the launch's last checkpoint, which the recipe reads from slime's
    latest_checkpointed_iteration.txt when the step runs (slime saves at the last rollout id)."""
    launch = _launch()
    [evaluation] = profile_commands(CONFIG, "scripts/web/eval.sh")
    [step] = [s for s in plan(PROFILES["web"]) if s.name == "eval"]
    checkpoints = tmp_path / launch.env["RUN_DIR"] / "checkpoints"
    checkpoints.mkdir(parents=True)
    last = int(launch.env["NUM_ROLLOUT"]) - 1
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(f"{last}\n")
    run = resolved(step, tmp_path)
    assert ProfileCommand({}, list(run.command)).option("--torch-dist") == [
        str(checkpoints / f"iter_{last:07d}")]
    assert evaluation.option("--config") == [launch.env["CONFIG"]] == ["configs/web_1gpu.yaml"]
    assert evaluation.option("--hf-base") == [launch.env["MODEL_DIR"]]


def test_our_hooks_accept_the_args_slime_made(web_one_gpu):
    _, args, _, _ = web_one_gpu
    check_slime_args(args, load_config(args.evolving_rl_config))
