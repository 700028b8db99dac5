"""slime's own parser and validators on a train.py argument list, before any run.

`python -m evolving_rl.slime_bridge.validate ARGV_FILE...` reads each NUL-separated list that a
launch's dry run writes (`SLIME_LAUNCH_DRY_RUN=DIR`, scripts/lib/slime_launch.sh) and runs
slime's `parse_args` at the pin on it (slime/utils/arguments.py:1600-1643): SGLang's parser,
Megatron-LM's parser with slime's arguments, then `slime_validate_args`, Megatron's
`validate_args` (through slime/backends/megatron_utils/arguments.py) and `sglang_validate_args`;
then our hooks' `check_slime_args` with the config the list names. One process for every list
(the imports are most of its time: SGLang + Megatron + slime ~8 s from bytecode on a CPU core);
each list's verdict goes to stdout as `VERDICT <code> <file>`: 0 when all accept, 2 with the
reasons logged otherwise. Exit: the largest code; 3 when slime's parser cannot be imported here.

Megatron's parser ignores unknown flags (slime/backends/megatron_utils/arguments.py:195) and
SGLang's parses known ones only, so every parser's option strings are recorded while it runs: a
flag none of them declares would be silently dropped, and is refused here.

Needs slime, Megatron-LM and SGLang importable: on slime's image (or the wheelhouse's stack) put
SLIME_DIR and MEGATRON_DIR on PYTHONPATH; on the CPU, SGLang comes from the overlay of
scripts/upstream_overlay.sh (tests/slime_upstream). Megatron's `validate_args` probes the GPU's
architecture when tensor parallelism > 1 (megatron/training/arguments.py:926-927); without a GPU
it is answered with `ASSUMED_ARCH` (9: Hopper, the H100 / H200 the profiles target) and said so.
"""

from __future__ import annotations

import argparse
import logging
import sys
from argparse import Namespace
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.settings import SlimeArgsError, check_slime_args

log = logging.getLogger(__name__)
ASSUMED_ARCH = 9
VALIDATORS = (("slime.utils.arguments", "slime_validate_args"),
              ("slime.backends.megatron_utils.arguments", "_megatron_validate_args"),
              ("slime.utils.arguments", "sglang_validate_args"))
VERDICT = "VERDICT"  # the stdout line of one list's verdict: VERDICT <code> <file>


@dataclass(frozen=True)
class Parsed:
    """What slime made of an argument list: its args, every option string its parsers declare,
    the validators that ran (in order), and whether the GPU-architecture probe was answered."""

    args: Namespace
    declared: frozenset[str]
    validators: tuple[str, ...]
    assumed_arch: bool

    def undeclared(self, argv: list[str]) -> list[str]:
        return sorted({t for t in argv if t.startswith("--")} - self.declared)


def _recording(declared: set[str]):
    parse_known = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self, *args, **kwargs):
        declared.update(self._option_string_actions)
        return parse_known(self, *args, **kwargs)
    return parse_known_args


def _counting(original, name: str, ran: list[str]):
    def call(*args, **kwargs):
        ran.append(name)
        return original(*args, **kwargs)
    return call


def _gpu_arch_known() -> bool:
    import torch

    return torch.cuda.is_available()


def slime_parse(argv: list[str]) -> Parsed:
    """slime's real `parse_args` on `argv` (module doc); raises what slime's validators raise."""
    import importlib

    import megatron.training.arguments as megatron_arguments
    from slime.utils import arguments as slime_arguments

    declared: set[str] = set()
    ran: list[str] = []
    assume = not _gpu_arch_known()
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(argparse.ArgumentParser, "parse_known_args",
                                              _recording(declared)))
        if assume:
            stack.enter_context(mock.patch.object(megatron_arguments, "get_device_arch_version",
                                                  lambda: ASSUMED_ARCH))
        for module_name, name in VALIDATORS:
            module = importlib.import_module(module_name)
            stack.enter_context(mock.patch.object(
                module, name, _counting(getattr(module, name), name, ran)))
        stack.enter_context(mock.patch.object(sys, "argv", ["train.py", *argv]))
        args = slime_arguments.parse_args()
    return Parsed(args, frozenset(declared), tuple(ran), assume)


def validate(argv: list[str]) -> list[str]:
    """Problems slime's parser, its validators or our hooks find in `argv` ([] when none)."""
    try:
        parsed = slime_parse(argv)
    except ImportError:
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 - slime's validators' refusal
        return [f"slime refused the arguments: {type(err).__name__}: {err}"]
    problems = [f"{flag}: declared by none of slime's parsers (it would be dropped silently)"
                for flag in parsed.undeclared(argv)]
    try:
        check_slime_args(parsed.args, load_config(parsed.args.evolving_rl_config))
    except SlimeArgsError as err:
        problems.append(str(err))
    if not problems:
        log.info("slime's parser accepted %d flags; validators ran: %s%s",
                 sum(t.startswith("--") for t in argv), ", ".join(parsed.validators),
                 f" (no GPU here: Megatron's architecture probe answered {ASSUMED_ARCH})"
                 if parsed.assumed_arch else "")
    return problems


def read_argv(path: Path) -> list[str]:
    """The NUL-separated argument list of the launch's dry run."""
    return path.read_bytes().decode().split("\0")[:-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.slime_bridge.validate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("argv_files", type=Path, nargs="+", metavar="argv_file",
                        help="DIR/train_argv of a launch's dry run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    codes = []
    for path in args.argv_files:
        try:
            problems = validate(read_argv(path))
        except ImportError as err:
            log.error("slime's parser is not importable here (%s): put slime, Megatron-LM and "
                      "SGLang on PYTHONPATH (the GPU image has them)", err)
            return 3
        for problem in problems:
            log.error("%s: %s", path, problem)
        codes.append(2 if problems else 0)
        print(f"{VERDICT} {codes[-1]} {path}", flush=True)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
