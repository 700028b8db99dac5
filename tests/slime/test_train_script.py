"""The slime launch scripts: they parse, every flag they give slime exists at the pinned commit, and
their reference hyper-parameters and schedule pass our hooks' own checks against
configs/alfworld.yaml; those checks refuse static micro-batches, a global batch other than one
optimiser step per rollout, and a zero --entropy-coef while a role has an entropy term.

A flag "exists" when slime's parsers at the pin declare it (slime/utils/arguments.py and the
backend argument modules, read from the mirror), when slime's own launchers at the pin pass it
(Megatron-LM's parser is not mirrored; its flags are the ones slime's scripts/run-*.sh use), or
when it is an `--sglang-*` pass-through of SGLang's server args.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import subprocess
from argparse import Namespace

import pytest
from slime_fixtures import (
    FLAG,
    MIRROR,
    ROOT,
    SLIME_COMMIT,
    SLIME_DEFAULTS,
    TRAIN_SCRIPT,
    launcher_args,
    mirror_file,
    script_arrays,
    script_defaults,
)

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.settings import HOOK_PATHS, SlimeArgsError, check_slime_args

CONVERT = ROOT / "scripts/models/convert_hf_to_torch_dist.sh"
PARSER_FILES = ("slime/utils/arguments.py", "slime/backends/megatron_utils/arguments.py",
                "slime/backends/sglang_utils/arguments.py")


@pytest.mark.parametrize("script", [TRAIN_SCRIPT, CONVERT], ids=lambda p: p.name)
def test_script_parses(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("script", [TRAIN_SCRIPT, CONVERT], ids=lambda p: p.name)
def test_script_passes_shellcheck(script):
    subprocess.run(["shellcheck", "-x", str(script)], check=True)


def _known_flags() -> set[str]:
    known = set()
    for path in PARSER_FILES:
        known |= set(re.findall(r'"(--[a-z0-9-]+)"', mirror_file(path)))
    listing = subprocess.run(["git", "-C", str(MIRROR), "ls-tree", "--name-only", SLIME_COMMIT,
                              "scripts/"], check=True, capture_output=True, text=True).stdout
    for path in listing.split():
        if re.fullmatch(r"scripts/run-[^/]+\.sh", path):
            known |= set(FLAG.findall(mirror_file(path)))
    return known


def test_every_flag_given_to_slime_exists_at_the_pin():
    arrays = script_arrays(TRAIN_SCRIPT.read_text())
    assert {"HOOK_ARGS", "LOSS_ARGS", "OPTIMIZER_ARGS", "ROLLOUT_ARGS"} <= set(arrays)
    known = _known_flags()
    given = {t for tokens in arrays.values() for t in tokens if FLAG.fullmatch(t)}
    unknown = sorted(f for f in given if f not in known and not f.startswith("--sglang-"))
    assert not unknown, f"flags slime does not know at {SLIME_COMMIT[:8]}: {unknown}"


def test_every_array_reaches_train_py():
    text = TRAIN_SCRIPT.read_text()
    command = text[text.index('train.py"'):]
    for name in script_arrays(text):
        assert f'"${{{name}[@]}}"' in command, name


def _parser_default(source: str, flag: str) -> object:
    """The default slime's parser source gives `flag` (a store_true switch without one: False)."""
    after = source[source.index(f'"{flag}"'):]
    call = re.split(r"add_argument\(|reset_arg\(", after, maxsplit=1)[0]
    match = re.search(r"default=([^,\n)]+)", call)
    if match:
        return ast.literal_eval(match.group(1))
    assert 'action="store_true"' in call, flag
    return False


def test_slime_defaults_we_assume_hold_at_the_pin():
    source = mirror_file("slime/utils/arguments.py")
    for key, value in SLIME_DEFAULTS.items():
        assert _parser_default(source, "--" + key.replace("_", "-")) == value, key


@pytest.fixture(scope="module")
def launched() -> Namespace:
    return launcher_args()


@pytest.fixture(scope="module")
def alfworld():
    return load_config(ROOT / "configs/alfworld.yaml")


def test_reference_hyperparameters_agree_with_our_config(launched, alfworld):
    for key, path in HOOK_PATHS.items():
        assert getattr(launched, key) == path
    assert launched.eval_function_path == HOOK_PATHS["rollout_function_path"]  # slime's default
    check_slime_args(launched, alfworld)
    defaults = script_defaults(TRAIN_SCRIPT.read_text())
    assert (launched.tensor_model_parallel_size, int(defaults["NUM_GPUS"])) == (2, 8)
    assert launched.rollout_batch_size == 16 and launched.n_samples_per_prompt == 1
    assert launched.rollout_top_p == 0.9  # read from the config by the script


def test_schedule_and_flags_of_the_reference_run(launched):
    """The reference's schedule (150 rollouts, save and eval every 25, greedy slime eval), one
    optimiser step per rollout with dynamic micro-batches, the entropy switch, and no
    --rollout-max-response-len (slime does not use it on our path; the config's max_new_tokens
    are what the pipeline sends)."""
    assert (launched.num_rollout, launched.save_interval, launched.eval_interval) == (150, 25, 25)
    assert (launched.eval_temperature, launched.eval_top_p, launched.eval_max_response_len) == \
        (0, 1.0, 4096)
    assert launched.num_steps_per_rollout == 1
    assert launched.global_batch_size == launched.rollout_batch_size == 16
    assert launched.use_dynamic_batch_size is True and launched.max_tokens_per_gpu == 20480
    assert launched.entropy_coef != 0
    assert not hasattr(launched, "rollout_max_response_len")


@pytest.mark.parametrize("change, flag", [
    ({"use_dynamic_batch_size": False}, "--use-dynamic-batch-size"),
    ({"global_batch_size": 640}, "--global-batch-size"),  # the reference's value
    ({"global_batch_size": 8}, "--global-batch-size"),  # what --num-steps-per-rollout 2 derives
    ({"global_batch_size": None}, "--global-batch-size"),
    ({"entropy_coef": 0.0}, "--entropy-coef"),
], ids=["static-batches", "gbs-640", "gbs-8", "gbs-unset", "entropy-coef-0"])
def test_check_refuses_batching_and_entropy_that_break_the_run(launched, alfworld, change, flag):
    args = Namespace(**{**vars(launched), **change})
    with pytest.raises(SlimeArgsError) as err:
        check_slime_args(args, alfworld)
    assert [line.split(":")[0].strip() for line in str(err.value).splitlines()[1:]] == [flag]


def test_check_accepts_any_entropy_switch_and_none_without_entropy_terms(launched, alfworld):
    check_slime_args(Namespace(**{**vars(launched), "entropy_coef": -0.03}), alfworld)
    no_entropy = dataclasses.replace(alfworld, loss=dataclasses.replace(
        alfworld.loss, entropy_coef=dataclasses.replace(alfworld.loss.entropy_coef, extractor=0.0)))
    check_slime_args(Namespace(**{**vars(launched), "entropy_coef": 0.0}), no_entropy)
