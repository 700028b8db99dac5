"""slime's command-line flags that our config and our hooks decide: the one source of them.

`scripts/lib/slime_launch.sh` keeps only paths, processes and the caller's extra flags; every
other flag it gives slime's train.py comes from `config_flags`, printed one token a line by
`python -m evolving_rl.slime_bridge.args --config X [-- EXTRA...]`. The hooks' run-time check
(`settings.check_slime_args`) compares slime's parsed args with the same list, so a value is
written once: change `loss.lr` in the config and slime's `--lr` follows.

argparse keeps the last value of a repeated flag, so a caller's extra flag would silently win
over the config's: `contradictions` refuses, before anything starts, an extra flag that sets one
of these to another value (exit 2, naming the config key to change instead).

Not given: `--kl-loss-coef`. slime reads it only in its own policy loss
(slime/backends/megatron_utils/loss.py:1130); under `--loss-type custom_loss` our loss applies the
per-role `loss.kl_coef`, and slime's default 0 (slime/utils/arguments.py:984-987) says so.

Checkpoints: `--save-interval N` (with `--save`) is given only when the launch asks for saves
(SAVE_INTERVAL=0: none, not even slime's save after the last rollout). A
launch with `--check-weight-update-equal` is a weight check: it saves nothing unless its extra
flags ask (`--save-interval`), since slime saves only on that interval or a release
(slime/utils/misc.py:121-122, train.py:70-80); one such launch wrote an 8.2 GiB checkpoint.
"""

from __future__ import annotations

import argparse
import math
import sys

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.settings import SlimeFlag, config_flags, flag_text

WEIGHT_CHECK = "--check-weight-update-equal"


def _given(extra: list[str], flag: str) -> str | bool | None:
    """The last value `extra` gives `flag` (True for a bare switch), None if absent."""
    found: str | bool | None = None
    for i, token in enumerate(extra):
        if token == flag:
            nxt = extra[i + 1] if i + 1 < len(extra) else None
            found = True if nxt is None or nxt.startswith("--") else nxt
        elif token.startswith(flag + "="):
            found = token.split("=", 1)[1]
    return found


def _agrees(given: str | bool, value: object) -> bool:
    if value is True or given is True:
        return given is True and value is True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return math.isclose(float(given), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    return given == str(value)


def contradictions(flags: list[SlimeFlag], extra: list[str]) -> list[str]:
    """A line for each extra flag that sets a decided flag to another value."""
    problems = []
    for flag in flags:
        given = _given(extra, flag.flag)
        if given is not None and not _agrees(given, flag.value):
            problems.append(f"{flag.flag} {given}: the config gives {flag_text(flag.value)} "
                            f"({flag.source}); change it there, not on the command line")
    return problems


def save_flags(save_dir: str, interval: str, extra: list[str]) -> list[str]:
    """`--save DIR --save-interval N`, or nothing: no interval (empty or 0), or a weight check
    that did not ask for saves itself (module doc)."""
    unasked = WEIGHT_CHECK in extra and _given(extra, "--save-interval") is None
    if interval in ("", "0") or unasked:
        return []
    return ["--save", save_dir, "--save-interval", interval]


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.slime_bridge.args",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="our YAML config")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of the config (as the launch's CONFIG_SET)")
    parser.add_argument("--save-dir", help="slime's --save folder (with --save-interval)")
    parser.add_argument("--save-interval", default="",
                        help="rollouts between checkpoints; empty: save nothing")
    return parser.parse_args(own), extra


def main(argv: list[str] | None = None) -> int:
    """Print the decided flags one token a line; exit 2 on a contradicting extra flag."""
    args, extra = _parse(sys.argv[1:] if argv is None else argv)
    flags = config_flags(load_config(args.config, args.set))
    problems = contradictions(flags, extra)
    if problems:
        sys.stderr.write("refused: extra slime flags contradict the config "
                         f"{args.config}:\n  " + "\n  ".join(problems) + "\n")
        return 2
    tokens = [token for flag in flags for token in flag.argv()]
    if args.save_dir:
        tokens += save_flags(args.save_dir, args.save_interval, extra)
    sys.stdout.write("".join(token + "\n" for token in tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
