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

from argparse import Namespace
from pathlib import Path

import pytest
import yaml
from conftest import slime_parse

from evolving_rl.config import load_config
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
    for flag in ("--rollout-top-p", "--entropy-coef", "--lr", "--eps-clip", "--kl-loss-coef",
                 "--sglang-mem-fraction-static"):
        assert getattr(args, flag[2:].replace("-", "_")) == float(argv[argv.index(flag) + 1])
    for key, path in HOOK_PATHS.items():
        assert getattr(args, key) == path
    assert args.loss_type == "custom_loss" and args.use_dynamic_batch_size
    assert args.global_batch_size == args.rollout_batch_size  # one optimiser step per rollout
    assert args.eval_function_path == HOOK_PATHS["rollout_function_path"]  # slime's default


def test_our_hooks_accept_the_args_slime_made(parsed):
    _, argv, args, _, _ = parsed
    custom = yaml.safe_load(Path(argv[argv.index("--custom-config-path") + 1]).read_text())
    assert args.evolving_rl_config == custom["evolving_rl_config"]  # slime set our key
    check_slime_args(args, load_config(args.evolving_rl_config))
