"""The slime launch scripts: they parse, every flag they give slime exists at the pinned commit, and
their reference hyper-parameters pass our hooks' own checks against configs/alfworld.yaml.

A flag "exists" when slime's parsers at the pin declare it (slime/utils/arguments.py and the
backend argument modules, read from the mirror), when slime's own launchers at the pin pass it
(Megatron-LM's parser is not mirrored; its flags are the ones slime's scripts/run-*.sh use), or
when it is an `--sglang-*` pass-through of SGLang's server args.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
from slime_fixtures import MIRROR, SLIME_COMMIT, mirror_file

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.settings import HOOK_PATHS, HOOKS_MODULE, check_slime_args

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "scripts/alfworld/train_alfworld.sh"
CONVERT = ROOT / "scripts/models/convert_hf_to_torch_dist.sh"
FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
PARSER_FILES = ("slime/utils/arguments.py", "slime/backends/megatron_utils/arguments.py",
                "slime/backends/sglang_utils/arguments.py")


@pytest.mark.parametrize("script", [TRAIN, CONVERT], ids=lambda p: p.name)
def test_script_parses(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("script", [TRAIN, CONVERT], ids=lambda p: p.name)
def test_script_passes_shellcheck(script):
    subprocess.run(["shellcheck", "-x", str(script)], check=True)


def _arrays(text: str) -> dict[str, list[str]]:
    """The script's `NAME_ARGS=( ... )` arrays as token lists (quotes stripped)."""
    arrays = {}
    for name, body in re.findall(r"^(\w+_ARGS)=\((.*?)\)\s*$", text, flags=re.S | re.M):
        body = "\n".join(line.split(" #")[0] for line in body.splitlines())
        arrays[name] = [token.strip('"') for token in body.split()]
    return arrays


def _defaults(text: str) -> dict[str, str]:
    return dict(re.findall(r'^(\w+)="\$\{\1:-([^}]*)\}"', text, flags=re.M))


def _expand(token: str, defaults: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), token)


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
    arrays = _arrays(TRAIN.read_text())
    assert {"HOOK_ARGS", "LOSS_ARGS", "OPTIMIZER_ARGS", "ROLLOUT_ARGS"} <= set(arrays)
    known = _known_flags()
    given = {t for tokens in arrays.values() for t in tokens if FLAG.fullmatch(t)}
    unknown = sorted(f for f in given if f not in known and not f.startswith("--sglang-"))
    assert not unknown, f"flags slime does not know at {SLIME_COMMIT[:8]}: {unknown}"


def test_every_array_reaches_train_py():
    text = TRAIN.read_text()
    command = text[text.index('train.py"'):]
    for name in _arrays(text):
        assert f'"${{{name}[@]}}"' in command, name


def _slime_namespace(arrays: dict[str, list[str]], defaults: dict[str, str]) -> Namespace:
    """What slime's parser would make of our flags (+ slime defaults for those we omit)."""
    args = Namespace(normalize_advantages=False, use_opd=False, kl_coef=0.0,
                     calculate_per_token_loss=False, use_kl_loss=False)
    for tokens in arrays.values():
        for i, token in enumerate(tokens):
            if not FLAG.fullmatch(token):
                continue
            value = tokens[i + 1] if i + 1 < len(tokens) else None
            key = token[2:].replace("-", "_")
            if value is None or FLAG.fullmatch(value):
                setattr(args, key, True)
                continue
            value = _expand(value, defaults)
            for cast in (int, float):
                try:
                    value = cast(value)
                    break
                except ValueError:
                    continue
            setattr(args, key, value)
    return args


def test_reference_hyperparameters_agree_with_our_config():
    text = TRAIN.read_text()
    defaults = {**_defaults(text), "HOOKS": HOOKS_MODULE}
    args = _slime_namespace(_arrays(text), defaults)
    for key, path in HOOK_PATHS.items():
        assert getattr(args, key) == path
    check_slime_args(args, load_config(ROOT / "configs/alfworld.yaml"))
    assert (args.tensor_model_parallel_size, int(defaults["NUM_GPUS"])) == (2, 8)
    assert args.rollout_batch_size == 16 and args.n_samples_per_prompt == 1
