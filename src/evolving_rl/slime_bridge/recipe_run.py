"""Running the one-GPU recipe (`recipe.plan`), or its dry run: the entry point of
scripts/slime_1gpu.sh.

A run executes each step not yet done, in order, from the repo root, and stops at the first that
fails (its exit code). The dry run executes nothing of the recipe: it prints each step (done or to
do) with its command, the prerequisites this machine has or lacks, then runs each launch in the
launch's dry-run mode and slime's own parser on what it would submit (`validate`), in a child
Python whose path holds slime and Megatron-LM (and SGLang's CPU overlay when there is one). It
exits 0 when slime's validators accepted every launch, 2 when one refused, 3 when none could be
checked here (slime's parser not importable).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evolving_rl.slime_bridge.recipe import (
    MODELS,
    PROFILES,
    ROOT,
    Step,
    plan,
    prerequisites,
    resolved,
)
from evolving_rl.slime_bridge.validate import VERDICT

log = logging.getLogger("slime_1gpu")
# The dev venv's CPU stand-ins for the GPU image's SGLang (scripts/upstream_overlay.sh) and
# torchvision (tests/slime_upstream/stand_ins: none matches the CPU torch), as the suite uses them.
# The overlay lives in the venv this Python runs in (scripts/upstream_overlay.sh: $VENV).
OVERLAY = (Path(sys.prefix) / "upstream-overlay", ROOT / "tests" / "slime_upstream" / "stand_ins")


ALL = "all"  # --profile all: every profile's dry run at once
# The launch's sizes a caller may set in the environment over the profile's (another GPU's
# memory, a shorter run); everything else of a step's environment is the profile's.
TUNABLE = ("SGLANG_MEM_FRACTION", "MAX_TOKENS_PER_GPU", "NUM_ROLLOUT", "EVAL_INTERVAL",
           "SAVE_INTERVAL")


def _environment(step: Step, extra_path: list[str] | None = None) -> dict[str, str]:
    """The step's environment, tunable sizes from the caller's; the launchers' Python is this
    one (PYTHON)."""
    tuned = {key: os.environ[key] for key in TUNABLE if key in os.environ and key in step.env}
    env = {"PYTHON": sys.executable, **os.environ, **step.env, **tuned}
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([*extra_path, env.get("PYTHONPATH", "")]).strip(":")
    return env


def _command(step: Step) -> list[str]:
    """The step's command, its `python3` this interpreter."""
    head, *rest = step.command
    return [sys.executable if head == "python3" else head, *rest]


def run(steps: list[Step], force: bool = False) -> int:
    """Run each step not done yet (every step with `force`); the first failure's exit code."""
    for number, step in enumerate(steps, 1):
        if step.done() and not force:
            log.info("[%d/%d] %s: done (%s)", number, len(steps), step.name, step.outputs[0])
            continue
        step = resolved(step)
        log.info("[%d/%d] %s: %s\n    %s", number, len(steps), step.name, step.why, step.shell())
        code = subprocess.run(_command(step), cwd=ROOT, env=_environment(step)).returncode
        if code != 0:
            log.error("step %s failed (exit %d): fix it and run again; done steps are skipped",
                      step.name, code)
            return code
    return 0


def _model_config(model_dir: str) -> str:
    """The config.json the conversion writes for the model of `model_dir` (`MODELS`)."""
    return next(m.config for m in MODELS.values() if m.folder == model_dir)


def _stand_in_model(folder: Path, config: str) -> Path:
    """A folder holding the model's config.json as the conversion writes it: what slime's HF
    checks read (the weights are not read by a dry run)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / config, folder / "config.json")
    return folder


def _on_cpu_overlay() -> bool:
    return OVERLAY[0].is_dir() and shutil.which("nvidia-smi") is None


def _validator(step: Step, argv_files: list[Path]) -> tuple[list[str], list[str]]:
    """(command, PYTHONPATH head) of `validate` on `argv_files`; on the dev CPU through the
    overlay, transformers is first told that the torchvision there is a stand-in."""
    paths = [str(ROOT / step.env["SLIME_DIR"]), step.env["MEGATRON_DIR"],
             str(ROOT / step.env["MEGATRON_DIR"]), str(ROOT / "src"), str(ROOT)]
    files = list(map(str, argv_files))
    command = [sys.executable, "-m", "evolving_rl.slime_bridge.validate", *files]
    if not _on_cpu_overlay():
        return command, paths
    boot = ("import sys, torchvision; torchvision.hide_torchvision_from_transformers(); "
            "from evolving_rl.slime_bridge.validate import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", boot, *files], [*map(str, OVERLAY), *paths]


def launch_argv(step: Step, scratch: Path) -> int:
    """The launch's dry run, its argument list written to `scratch/launch/train_argv`."""
    env = dict(step.env)
    if not (ROOT / env["MODEL_DIR"] / "config.json").is_file():
        config = _model_config(env["MODEL_DIR"])
        stand_in = str(_stand_in_model(scratch / "model", config))
        log.info("    the model is not there yet: slime's checks read %s in a stand-in folder",
                 config)
        env.update(MODEL_DIR=stand_in, REF_DIR=stand_in)
    env["SLIME_LAUNCH_DRY_RUN"] = str(scratch / "launch")
    launch = subprocess.run(step.command, cwd=ROOT, env=_environment(Step(
        step.name, step.why, step.command, (), env)), capture_output=True, text=True)
    sys.stderr.write(launch.stderr)
    return launch.returncode


def check_launches(steps: list[Step], scratch: Path) -> dict[str, int]:
    """Each launch's dry run, then slime's parser on every argument list in one child (its
    imports are most of its time); per launch, the exit code as `main`'s."""
    codes, files = {}, {}
    for step in steps:
        print(f"{step.name}: slime's parser and validators on the launch's argument list")
        codes[step.name] = launch_argv(step, scratch / step.name)
        if codes[step.name] == 0:
            files[step.name] = scratch / step.name / "launch" / "train_argv"
    if not files:
        return codes
    first = steps[0]
    assert all(s.env["SLIME_DIR"] == first.env["SLIME_DIR"] and
               s.env["MEGATRON_DIR"] == first.env["MEGATRON_DIR"] for s in steps)
    command, path = _validator(first, list(files.values()))
    check = subprocess.run(command, cwd=ROOT, env=_environment(first, path),
                           capture_output=True, text=True)
    sys.stderr.write(check.stderr)
    verdicts = {}
    for line in check.stdout.splitlines():
        if line.startswith(VERDICT + " "):
            _, code, argv_file = line.split(" ", 2)
            verdicts[argv_file] = int(code)
    for name, argv_file in files.items():  # a list without a verdict: the child's exit code
        codes[name] = verdicts.get(str(argv_file), check.returncode or 2)
    return codes


def _is_launch(step: Step) -> bool:
    """A launch step, named `launch[-<method>]` (`<profile>:launch...` under `--profile all`)."""
    return step.name.rpartition(":")[2].startswith("launch")


def dry_run(steps: list[Step], slime_dir: str, megatron_dir: str) -> int:
    """Print the plan and the prerequisites; check every launch with slime's parser."""
    for number, step in enumerate(steps, 1):
        state = "done" if step.done() else "to do"
        print(f"[{number}/{len(steps)}] {step.name} ({state}): {step.why}\n    {step.shell()}")
    print("prerequisites on this machine:")
    for what, present, how in prerequisites(megatron_dir, slime_dir):
        print(f"    {'ok     ' if present else 'missing'} {what}{'' if present else ': ' + how}")
    launches = [s for s in steps if _is_launch(s)]
    with tempfile.TemporaryDirectory(prefix="slime_1gpu_") as scratch:
        codes = check_launches(launches, Path(scratch))
    for step in launches:
        print(f"{step.name}: {_verdict(codes[step.name])}")
    return max(codes.values(), default=0)


def _verdict(code: int) -> str:
    return {0: "accepted", 3: "not checked: slime's parser is not importable here"}.get(
        code, f"refused (exit {code})")


def _default_megatron() -> str:
    image = Path("/root/Megatron-LM")  # slime's image
    return str(image) if (image / "megatron").is_dir() else "upstream/Megatron-LM"


def _profile_steps(name: str, args: argparse.Namespace) -> list[Step]:
    """`name`'s plan; under `--profile all` each step named `<profile>:<step>`, unique across
    the profiles (several have a launch-evolving)."""
    steps = plan(PROFILES[name], slime_dir=args.slime_dir, megatron_dir=args.megatron_dir,
                 seed=args.seed, model=MODELS[args.model_size])
    if args.method:
        steps = [s for s in steps if not _is_launch(s) or s.name == f"launch-{args.method}"]
    if args.profile != ALL:
        return steps
    return [dataclasses.replace(step, name=f"{name}:{step.name}") for step in steps]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/slime_1gpu.sh", description=__doc__)
    parser.add_argument("--profile", choices=[*sorted(PROFILES), ALL], default="alfworld",
                        help=f"`{ALL}` (with --dry-run): every profile's plan, their launches "
                        "checked by one child (one import of slime, Megatron-LM and SGLang)")
    parser.add_argument("--method", help="one method of a comparison profile (default: each)")
    parser.add_argument("--model-size", choices=sorted(MODELS), default="0.5b",
                        help="the Qwen2.5-Coder-Instruct size trained (runs/..._<size>_... "
                        "when not 0.5b)")
    parser.add_argument("--seed", type=int, help="the launches' run seed (run.seed; default: "
                        "the config's), each in a run folder of its own (..._seedN)")
    parser.add_argument("--dry-run", action="store_true", help="check and print; run nothing")
    parser.add_argument("--force", action="store_true", help="run done steps again")
    parser.add_argument("--only", help="run this step alone (a name the plan prints)")
    parser.add_argument("--slime-dir", default=os.environ.get("SLIME_DIR", "slime"))
    parser.add_argument("--megatron-dir", default=os.environ.get("MEGATRON_DIR") or
                        _default_megatron())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.profile == ALL and not args.dry_run:
        parser.error(f"--profile {ALL} is for --dry-run only")
    steps = [step for name in (sorted(PROFILES) if args.profile == ALL else [args.profile])
             for step in _profile_steps(name, args)]
    if args.only:
        steps = [s for s in steps if s.name == args.only]
        if not steps:
            parser.error(f"--only {args.only}: no such step")
    if args.dry_run:
        return dry_run(steps, args.slime_dir, args.megatron_dir)
    return run(steps, force=args.force or bool(args.only))


if __name__ == "__main__":
    sys.exit(main())
