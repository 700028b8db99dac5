"""The software stack slime at our pin runs with, and the launch's check of the stack it finds.

slime 624b824a is built and released as the image `slimerl/slime:nightly-dev-20260810a-cu129`
(CUDA 12; `-cu130` for Blackwell): the version is slime's docker/version.txt and the tag
`<version>-cu129` (docker/justfile, `_release-raw`). In it: SGLang v0.5.15.post1
(docker/Dockerfile:1, docker/README.md:8) with slime's SGLang patches, among them the top-p
replay patch (docker/Dockerfile:136-150, docker/patch/latest/sglang-top_p.patch); Megatron-LM
1dcf0daf (docker/Dockerfile:7) with slime's Megatron patches; and slime's fork of sglang-router
(docker/Dockerfile:111), which the image asserts by `'slime' in sglang_router.__version__`
(docker/Dockerfile:112).

`python -m evolving_rl.slime_bridge.stack --config C --megatron-dir D` runs at the launch
(scripts/lib/slime_launch.sh) before anything starts:
- with top-p replay on (the config's top-p < 1) and no forked router, it fails (exit 2) naming
  both requirements: the stock router drops `sampling_params.custom_params`, so SGLang never
  returns a nucleus and every top-p rollout raises; the patched SGLang alone is not enough;
- a SGLang version or Megatron-LM commit other than the pin's is logged as a loud warning (the
  run goes on: newer builds may work, but nothing here was checked against them).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from evolving_rl.config import ConfigError, load_config

logger = logging.getLogger(__name__)

ROUTER_FORK_MARK = "slime"


@dataclass(frozen=True)
class StackPin:
    """What slime at our pin was built with."""

    image: str
    sglang_version: str
    megatron_commit: str


PIN = StackPin(image="slimerl/slime:nightly-dev-20260810a-cu129", sglang_version="0.5.15.post1",
               megatron_commit="1dcf0dafa884ad52ffb243625717a3471643e087")


@dataclass(frozen=True)
class FoundStack:
    """What this environment has; None where it cannot be seen."""

    sglang_version: str | None
    megatron_commit: str | None
    router_version: str | None


def _router_version() -> str | None:
    try:
        module = importlib.import_module("sglang_router")
    except ImportError:
        return None
    return str(getattr(module, "__version__", ""))


def _sglang_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_head(folder: Path) -> str | None:
    """The commit checked out in `folder` when it is the top of a git work tree. A folder
    inside another repository (a copy of Megatron-LM under this checkout's ignored upstream/,
    2026-12-07: it reported this repo's own HEAD as Megatron's commit) has no commit of its own."""
    try:
        result = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel",
                                 "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        return None
    top, head = lines
    return head if Path(top).resolve() == folder.resolve() else None


def find_stack(megatron_dir: Path) -> FoundStack:
    """SGLang's installed version, Megatron-LM's commit in `megatron_dir`, the router's version."""
    return FoundStack(_sglang_version(), _git_head(megatron_dir), _router_version())


def router_problem(found: FoundStack, top_p: float) -> str | None:
    """Why top-p replay cannot work with this router, or None."""
    if top_p >= 1.0 or (found.router_version is not None
                        and ROUTER_FORK_MARK in found.router_version):
        return None
    seen = ("no sglang_router" if found.router_version is None
            else f"sglang_router {found.router_version!r}, not slime's fork")
    return (f"top-p replay (rollout top-p {top_p} < 1) needs both slime's patched SGLang "
            f"(docker/patch/latest/sglang-top_p.patch) and slime's fork of sglang-router "
            f"(slime docker/Dockerfile:111, whose __version__ contains '{ROUTER_FORK_MARK}'); "
            f"found {seen}. The stock router drops sampling_params.custom_params, so every "
            f"top-p rollout would fail. Run in {PIN.image}, or set sampling top_p to 1.0.")


def version_mismatches(found: FoundStack, pin: StackPin = PIN) -> list[str]:
    """Each visible version that differs from the pin's (an unseen one is not a mismatch)."""
    out = []
    if found.sglang_version is None:
        out.append(f"sglang is not installed for this interpreter (the pin: {pin.sglang_version})")
    elif found.sglang_version.split("+")[0] != pin.sglang_version:
        out.append(f"sglang {found.sglang_version}, the pin's is {pin.sglang_version}")
    if found.megatron_commit is not None and found.megatron_commit != pin.megatron_commit:
        out.append(f"Megatron-LM at {found.megatron_commit[:12]}, the pin's is "
                   f"{pin.megatron_commit[:12]}")
    return out


def check(top_p: float, megatron_dir: Path) -> int:
    """Log the stack; 2 when top-p replay cannot work, else 0 (mismatches only warn)."""
    found = find_stack(megatron_dir)
    logger.info("stack: sglang %s, Megatron-LM %s, sglang_router %s", found.sglang_version,
                found.megatron_commit or "(commit not visible)", found.router_version)
    mismatches = version_mismatches(found)
    if mismatches:
        logger.warning("!" * 80)
        for line in mismatches:
            logger.warning("VERSION MISMATCH: %s", line)
        logger.warning("slime 624b824a was built and tested in %s; this run is not.", PIN.image)
        logger.warning("!" * 80)
    problem = router_problem(found, top_p)
    if problem:
        logger.error(problem)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="our YAML config (its sampling top-p)")
    parser.add_argument("--megatron-dir", required=True, type=Path,
                        help="the Megatron-LM checkout the job will import")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as error:
        logger.error("%s", error)
        return 2
    return check(config.sampling.solver.top_p, args.megatron_dir)


if __name__ == "__main__":
    sys.exit(main())
