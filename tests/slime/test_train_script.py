"""The slime launch scripts (scripts/alfworld/train_alfworld.sh and scripts/web/train_web.sh, both
running the shared scripts/lib/slime_launch.sh): they parse, every flag they give slime exists at
the pinned commit, their reference hyper-parameters and schedules pass our hooks' own checks
against their configs (configs/alfworld.yaml, configs/web.yaml), the values the launch reads from
a config (top-p, the entropy switch) follow that config, and a missing prerequisite is named
before anything starts. The checks refuse static micro-batches, a global batch other than one
optimiser step per rollout, and a zero --entropy-coef while a role has an entropy term.

A flag "exists" when slime's parsers at the pin declare it (slime/utils/arguments.py and the
backend argument modules, read as text), when slime's own launchers at the pin pass it (Megatron's
flags, as slime's scripts/run-*.sh use them), or when it is an `--sglang-*` pass-through of
SGLang's server args. tests/slime_upstream runs the real parsers and validators on the scripts'
exact command lines.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from slime_fixtures import (
    FLAG,
    LAUNCH_LIB,
    ROOT,
    SLIME_DEFAULTS,
    TRAIN_SCRIPTS,
    config_tokens,
    default_config,
    launch_text,
    launcher_args,
    script_arrays,
    script_defaults,
    slime_file,
)

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.settings import HOOK_PATHS, SlimeArgsError, check_slime_args
from tests import upstream

CONVERT = ROOT / "scripts/models/convert_hf_to_torch_dist.sh"
PARSER_FILES = ("slime/utils/arguments.py", "slime/backends/megatron_utils/arguments.py",
                "slime/backends/sglang_utils/arguments.py")
SCRIPT_IDS = {"ids": lambda p: p.name}


@dataclass(frozen=True)
class Reference:
    """A train script's reference run: its schedule, splits and config-derived flag values."""

    schedule: tuple[int, int, int]  # rollouts, save interval, eval interval
    train_split: str
    eval_splits: str
    top_p: float
    entropy_switch: int


REFERENCE = {
    "train_alfworld.sh": Reference((150, 25, 25), "train_seen", "valid_unseen valid_seen", 0.9, 1),
    "train_web.sh": Reference((200, 50, 25), "train", "test_task test_website test_domain", 0.85,
                              0),
}


@pytest.mark.parametrize("script", [*TRAIN_SCRIPTS, LAUNCH_LIB, CONVERT], **SCRIPT_IDS)
def test_script_parses(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


def _known_flags() -> set[str]:
    known = set()
    for path in PARSER_FILES:
        known |= set(re.findall(r'"(--[a-z0-9-]+)"', slime_file(path)))
    for path in sorted(upstream.slime_dir().glob("scripts/run-*.sh")):
        known |= set(FLAG.findall(path.read_text()))
    return known


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, **SCRIPT_IDS)
def test_every_flag_given_to_slime_exists_at_the_pin(script):
    text = launch_text(script)
    arrays = script_arrays(text)
    assert {"HOOK_ARGS", "OPTIMIZER_ARGS", "ROLLOUT_ARGS"} <= set(arrays)
    known = _known_flags()
    tokens = [*(t for ts in arrays.values() for t in ts),
              *config_tokens(default_config(script), script_defaults(text))]
    given = {t for t in tokens if FLAG.fullmatch(t)}
    unknown = sorted(f for f in given if f not in known and not f.startswith("--sglang-"))
    assert not unknown, f"flags slime does not know at the pin: {unknown}"


@pytest.mark.parametrize("script", TRAIN_SCRIPTS, **SCRIPT_IDS)
def test_every_array_reaches_train_py(script):
    text = launch_text(script)
    command = text[text.index('TRAIN_ARGV=(python3 "$SLIME_DIR/train.py"'):]
    for name in [*script_arrays(text), "CONFIG_FLAGS"]:
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
    source = slime_file("slime/utils/arguments.py")
    for key, value in SLIME_DEFAULTS.items():
        assert _parser_default(source, "--" + key.replace("_", "-")) == value, key


@pytest.fixture(scope="module", params=TRAIN_SCRIPTS, ids=lambda p: p.name)
def script(request) -> Path:
    return request.param


@pytest.fixture(scope="module")
def launched(script) -> Namespace:
    return launcher_args(script)


@pytest.fixture(scope="module")
def alfworld():
    return load_config(ROOT / "configs/alfworld.yaml")


def test_reference_hyperparameters_agree_with_our_config(script, launched):
    for key, path in HOOK_PATHS.items():
        assert getattr(launched, key) == path
    assert launched.eval_function_path == HOOK_PATHS["rollout_function_path"]  # slime's default
    check_slime_args(launched, load_config(default_config(script)))
    defaults = script_defaults(launch_text(script))
    assert (launched.tensor_model_parallel_size, int(defaults["NUM_GPUS"])) == (2, 8)
    assert launched.rollout_batch_size == 16 and launched.n_samples_per_prompt == 1
    assert launched.rollout_top_p == REFERENCE[script.name].top_p  # read from the config


def test_schedule_and_flags_of_the_reference_run(script, launched):
    """The reference's schedule and splits (ALFWorld: 150 rollouts, save and eval every 25; web:
    200 rollouts, save every 50, eval every 25 on the three test splits), greedy slime eval, one
    optimiser step per rollout with dynamic micro-batches, the entropy switch exactly when the
    config has an entropy term, and no --rollout-max-response-len (slime does not use it on our
    path; the config's max_new_tokens are what the pipeline sends)."""
    reference = REFERENCE[script.name]
    assert (launched.num_rollout, launched.save_interval, launched.eval_interval) == \
        reference.schedule
    defaults = script_defaults(launch_text(script))
    assert (defaults["TRAIN_SPLIT"], defaults["EVAL_SPLITS"]) == \
        (reference.train_split, reference.eval_splits)
    assert (launched.eval_temperature, launched.eval_top_p, launched.eval_max_response_len) == \
        (0, 1.0, 4096)
    assert launched.num_steps_per_rollout == 1
    assert launched.global_batch_size == launched.rollout_batch_size == 16
    assert launched.use_dynamic_batch_size is True and launched.max_tokens_per_gpu == 20480
    assert launched.entropy_coef == reference.entropy_switch
    assert not hasattr(launched, "rollout_max_response_len")


@pytest.mark.parametrize("entropy", [{"extractor": -0.03}, {"solver": 0.0, "extractor": 0.0}],
                         ids=["entropy-term", "no-entropy-term"])
def test_config_values_of_the_launch_follow_the_config(tmp_path, script, entropy):
    """Another config, the same script: --rollout-top-p and the entropy switch follow it, and the
    hooks' checks accept the result."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "environment": "mind2web", "loss": {"entropy_coef": entropy},
        "sampling": {role: {"top_p": 0.7} for role in ("solver", "extractor")}}))
    args = launcher_args(script, path)
    assert (args.rollout_top_p, args.entropy_coef) == (0.7, int(any(entropy.values())))
    check_slime_args(args, load_config(path))


@pytest.mark.parametrize("change, flag", [
    ({"use_dynamic_batch_size": False}, "--use-dynamic-batch-size"),
    ({"global_batch_size": 640}, "--global-batch-size"),  # the reference's value
    ({"global_batch_size": 8}, "--global-batch-size"),  # what --num-steps-per-rollout 2 derives
    ({"global_batch_size": None}, "--global-batch-size"),
    ({"entropy_coef": 0.0}, "--entropy-coef"),
], ids=["static-batches", "gbs-640", "gbs-8", "gbs-unset", "entropy-coef-0"])
def test_check_refuses_batching_and_entropy_that_break_the_run(alfworld, change, flag):
    args = Namespace(**{**vars(launcher_args()), **change})
    with pytest.raises(SlimeArgsError) as err:
        check_slime_args(args, alfworld)
    assert [line.split(":")[0].strip() for line in str(err.value).splitlines()[1:]] == [flag]


def test_check_accepts_any_entropy_switch_and_none_without_entropy_terms(alfworld):
    launched = launcher_args()
    check_slime_args(Namespace(**{**vars(launched), "entropy_coef": -0.03}), alfworld)
    no_entropy = dataclasses.replace(alfworld, loss=dataclasses.replace(
        alfworld.loss, entropy_coef=dataclasses.replace(alfworld.loss.entropy_coef, extractor=0.0)))
    check_slime_args(Namespace(**{**vars(launched), "entropy_coef": 0.0}), no_entropy)


def _run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_missing_prerequisites_are_named_before_anything_starts(tmp_path, script):
    """Each prerequisite in turn, then the stack (top-p replay without slime's router fork): the
    script stops with exit 2 and a message naming it, and has created nothing (not even its run
    folder)."""
    if any(Path(folder, "ray").exists() for folder in ("/usr/bin", "/bin")):
        pytest.skip("a ray command on /usr/bin or /bin: the script could start a real run")
    reference = REFERENCE[script.name]
    slime, model, prepared = tmp_path / "slime", tmp_path / "model", tmp_path / "prepared"
    config = yaml.safe_load(default_config(script).read_text())
    config.setdefault("retrieval", {})["cache_path"] = str(tmp_path / "cache.npz")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path),
           "CONFIG": str(tmp_path / "config.yaml"), "SLIME_DIR": str(slime),
           "MODEL_DIR": str(model), "PREPARED_DIR": str(prepared), "RUN_DIR": str(tmp_path / "run")}
    files = [slime / "train.py", slime / "scripts/models/qwen2.5-7B.sh", model,
             Path(f"{model}_torch_dist"), prepared / f"{reference.train_split}.jsonl",
             *(prepared / f"{split}.jsonl" for split in reference.eval_splits.split()),
             tmp_path / "cache.npz"]
    for path in files:
        result = _run(script, env)
        assert result.returncode == 2, result.stderr
        assert "missing" in result.stderr and str(path) in result.stderr.split(), result.stderr
        if path in (model, Path(f"{model}_torch_dist")):
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
    result = _run(script, env)
    assert result.returncode == 2 and "missing the ray command" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()
    # then the stack: the scripts' top-p replay without slime's sglang-router fork (this venv
    # has none, or PyPI's stock one); the stub `ray` records any call
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/ray").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/ray_calls\n')
    (tmp_path / "bin/ray").chmod(0o755)
    result = _run(script, {**env, "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert "slime's fork of sglang-router" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "ray_calls").exists()
