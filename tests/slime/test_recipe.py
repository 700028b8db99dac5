"""The one-GPU recipe (scripts/slime_1gpu.sh, src/evolving_rl/slime_bridge/recipe*.py): its plan
for every profile, a run that skips done steps and stops at the first failure, the dry run on
this CPU machine (every launch's argument list accepted by slime's real parser and validators at
the pin, from ../shared/upstream), and scripts/upstream_sources.sh against local git remotes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slime_fixtures import ROOT

from evolving_rl.slime_bridge import recipe, recipe_run, validate
from evolving_rl.slime_bridge.recipe import PROFILES, Step, plan
from tests import upstream


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_plan_runs_sources_model_data_cache_then_launch(name):
    profile = PROFILES[name]
    steps = plan(profile)
    names = [s.name for s in steps]
    assert names[:3] == ["upstream", "model", "hf-model"]
    launches = [s for s in steps if s.name.startswith("launch")]
    assert len(launches) == max(1, len(profile.methods))
    assert names.index("cache") < names.index(launches[0].name)
    for step in launches:
        # no conversion: slime loads the HF folder
        assert step.env["MODEL_DIR"] == step.env["REF_DIR"] == recipe.DEFAULT_MODEL.folder
        assert step.env["CONFIG"] == profile.config and "PROMPTS_PER_ROLLOUT" not in step.env
        assert step.command[:2] == ("bash", profile.script) and "--spec" in step.command
    for split in _eval_splits(launches[0]):  # every split the launch names is made by a step
        made = [o for s in steps for o in s.outputs]
        assert f"{profile.prepared_dir}/{split}.jsonl" in made, split
    methods = {s.env.get("CONFIG_SET") for s in launches}
    assert methods == ({f"pipeline.method={m}" for m in profile.methods} or {None})
    assert len({s.env["RUN_DIR"] for s in launches}) == len(launches)


def _eval_splits(launch: Step) -> list[str]:
    profile = next(p for p in PROFILES.values() if p.config == launch.env["CONFIG"])
    script = (ROOT / profile.script).read_text()
    default = script.split('EVAL_SPLITS="${EVAL_SPLITS:-')[1].split("}")[0]
    return launch.env.get("EVAL_SPLITS", default).split()


def test_a_run_skips_done_steps_and_stops_at_the_first_failure(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(recipe_run, "ROOT", tmp_path)
    monkeypatch.setattr(recipe, "ROOT", tmp_path)
    (tmp_path / "made").write_text("")
    record = tmp_path / "ran"
    steps = [Step("one", "done already", ("sh", "-c", f"echo one >> {record}"), ("made",)),
             Step("two", "runs", ("sh", "-c", f"echo two >> {record}; touch made2"), ("made2",)),
             Step("three", "fails", ("sh", "-c", f"echo three >> {record}; exit 7")),
             Step("four", "never reached", ("sh", "-c", f"echo four >> {record}"))]
    with caplog.at_level("INFO"):
        assert recipe_run.run(steps) == 7
    assert record.read_text().split() == ["two", "three"]
    assert "step three failed (exit 7)" in caplog.text
    record.unlink()
    assert recipe_run.run(steps[:2]) == 0 and not record.exists()  # both done now


def test_a_python3_step_runs_with_this_interpreter():
    step = Step("x", "y", ("python3", "-m", "evolving_rl.local.model", "--help"))
    assert recipe_run._command(step)[0] == sys.executable


def test_one_validator_child_judges_every_launch_of_a_profile(tmp_path, monkeypatch):
    """The dry run's launches each write their list, then one child judges them all: each launch
    gets its own verdict line's code, a launch whose dry run failed keeps its exit code, and a
    list the child never judged gets the child's exit code."""
    env = {"SLIME_DIR": "slime", "MEGATRON_DIR": "megatron"}
    steps = [Step(f"launch-{m}", "y", ("true",), (), env) for m in ("a", "b", "c", "d")]

    def launch_argv(step, scratch):
        (scratch / "launch").mkdir(parents=True)
        (scratch / "launch" / "train_argv").write_bytes(b"--x\0")
        return 5 if step.name == "launch-c" else 0

    def validator(step, files):
        judged = "".join(f"print('VERDICT {code} {path}');"
                         for code, path in zip((0, 2), files[:2], strict=True))
        return [sys.executable, "-c", judged + "raise SystemExit(4)"], []

    monkeypatch.setattr(recipe_run, "launch_argv", launch_argv)
    monkeypatch.setattr(recipe_run, "_validator", validator)
    codes = recipe_run.check_launches(steps, tmp_path)
    assert codes == {"launch-a": 0, "launch-b": 2, "launch-c": 5, "launch-d": 4}


def test_the_validator_prints_a_verdict_per_list_and_exits_with_the_worst(tmp_path, monkeypatch,
                                                                          capsys):
    files = [tmp_path / name for name in ("ok", "refused")]
    for path in files:
        path.write_bytes(f"--{path.name}\0".encode())
    monkeypatch.setattr(validate, "validate",
                        lambda argv: ["no"] if argv == ["--refused"] else [])
    assert validate.main(list(map(str, files))) == 2
    assert capsys.readouterr().out.splitlines() == [f"VERDICT 0 {files[0]}",
                                                    f"VERDICT 2 {files[1]}"]


@pytest.mark.end_to_end
@pytest.mark.parametrize("size", sorted(recipe.MODELS))
def test_the_dry_run_of_every_profile_passes_on_this_cpu_machine(size):
    """A fresh-clone state (no model, data or cache needed), `--profile all`: every profile's plan
    is printed, and every launch's full argument list is accepted by slime's parser and its three
    validators, all in one child (at 1.5B too: slime's HF check refuses its model-args script's
    rotary base without ours)."""
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("SLIME_DIR", None)
    run = subprocess.run(
        ["bash", "scripts/slime_1gpu.sh", "--profile", "all", "--model-size", size, "--dry-run",
         "--slime-dir", str(upstream.slime_dir()), "--megatron-dir", str(upstream.megatron_dir())],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    launches = []
    for name in sorted(PROFILES):
        steps = plan(PROFILES[name], slime_dir=str(upstream.slime_dir()),
                     megatron_dir=str(upstream.megatron_dir()), model=recipe.MODELS[size])
        for step in steps:
            assert f"] {name}:{step.name} (" in run.stdout and step.shell() in run.stdout
        launches += [f"{name}:{s.name}" for s in steps if s.name.startswith("launch")]
    assert len(launches) == 7
    assert [line for line in run.stdout.splitlines() if line.endswith(": accepted")] == [
        f"{launch}: accepted" for launch in launches]
    assert run.stderr.count("validators ran: slime_validate_args, _megatron_validate_args, "
                            "sglang_validate_args") == len(launches)


def test_profile_all_is_for_the_dry_run_only(capsys):
    with pytest.raises(SystemExit):
        recipe_run.main(["--profile", "all"])
    assert "--profile all is for --dry-run only" in capsys.readouterr().err


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, "GIT_AUTHOR_NAME": "t",
                                          "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                          "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()


def _remote(folder: Path, files: dict[str, str]) -> str:
    folder.mkdir(parents=True)
    _git(folder, "init", "-q")
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "x")
    return _git(folder, "rev-parse", "HEAD")


def test_upstream_sources_makes_megatron_at_slimes_commit_with_its_patches(tmp_path):
    """slime's Dockerfile names the Megatron commit; both patches apply; a rerun does nothing;
    slime must be at this checkout's submodule pin."""
    megatron_commit = _remote(tmp_path / "megatron_remote", {"megatron/training/arguments.py":
                                                             "a = 1\n", "README": "r\n"})
    patch = ("--- a/megatron/training/arguments.py\n+++ b/megatron/training/arguments.py\n"
             "@@ -1 +1 @@\n-a = 1\n+a = 2\n")
    patch2 = "--- a/README\n+++ b/README\n@@ -1 +1 @@\n-r\n+patched\n"
    slime = tmp_path / "slime"
    slime.mkdir()
    (slime / "train.py").write_text("")
    (slime / "docker/patch/latest").mkdir(parents=True)
    (slime / "docker/Dockerfile").write_text(f"ARG MEGATRON_COMMIT={megatron_commit}\n")
    (slime / "docker/patch/latest/megatron.patch").write_text(patch)
    (slime / "docker/patch/latest/megatron-sglang-aligned.patch").write_text(patch2)
    env = {**os.environ, "MEGATRON_URL": str(tmp_path / "megatron_remote")}
    command = ["bash", "scripts/upstream_sources.sh", "--slime-dir", str(slime),
               "--megatron-dir", str(tmp_path / "Megatron-LM")]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0 and "its commit is not checked" in run.stdout, run.stderr
    megatron = tmp_path / "Megatron-LM"
    assert (megatron / "megatron/training/arguments.py").read_text() == "a = 2\n"
    assert (megatron / "README").read_text() == "patched\n"
    assert _git(megatron, "rev-parse", "HEAD") == megatron_commit
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "already in" in again.stdout
    # a git checkout of slime at another commit than this checkout's submodule pin: refused
    _remote_in(slime)
    wrong = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert wrong.returncode == 2 and "not the pin" in wrong.stderr


def _remote_in(folder: Path) -> None:
    _git(folder, "init", "-q")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "not the pin")


def test_the_callers_sizes_replace_the_profiles_and_nothing_else(monkeypatch):
    step = plan(PROFILES["learn"])[-1]
    monkeypatch.setenv("SGLANG_MEM_FRACTION", "0.25")
    monkeypatch.setenv("CONFIG", "configs/other.yaml")
    env = recipe_run._environment(step)
    assert env["SGLANG_MEM_FRACTION"] == "0.25" and env["CONFIG"] == PROFILES["learn"].config
    assert env["PYTHON"] == sys.executable


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_generated_data_step_names_its_seed(name):
    """Two users of a profile get the same games or tasks: a data step that generates names
    `--seed` (the learn profile's did not)."""
    for step in PROFILES[name].data:
        if "--generate" in step.command:
            assert "--seed" in step.command, step.command


def test_a_seed_reaches_each_launch_and_its_own_run_folder_not_the_data():
    """`--seed N`: the run seed of every launch of the comparison (the config's run.seed, hence
    slime's --seed and --rollout-seed), each in its own folder; the games stay the data step's."""
    profile = PROFILES["learn"]
    default, seeded = plan(profile), plan(profile, seed=3)
    launches = [s for s in seeded if s.name.startswith("launch")]
    assert [s.env["CONFIG_SET"] for s in launches] == [
        f"pipeline.method={m} run.seed=3" for m in profile.methods]
    assert [s.env["RUN_DIR"] for s in launches] == [
        f"runs/learn_1gpu_{m}_seed3" for m in profile.methods]
    assert [s for s in seeded if s.name == "data"] == [s for s in default if s.name == "data"]


def test_a_model_size_changes_the_model_steps_launch_and_run_folder_only():
    """`--model-size 1.5b`: the 1.5B's GGUF and HF folder, slime's 1.5B model-args script with
    the Coder 1.5B's rotary base (its script has the base model's 10000, which slime's HF check
    refuses: rope_theta 1e6), and a run folder of its own; the data and cache steps unchanged."""
    profile, model = PROFILES["learn"], recipe.MODELS["1.5b"]
    default, sized = plan(profile), plan(profile, model=model)
    steps = {s.name: s for s in sized}
    assert steps["model"].command[-2:] == ("--size", "1.5b")
    assert steps["model"].outputs == ("models/Qwen2.5-Coder-1.5B-Instruct.gguf",)
    assert steps["hf-model"].command[-1] == "qwen2.5-coder-1.5b"
    for launch in (s for s in sized if s.name.startswith("launch")):
        assert launch.env["MODEL_DIR"] == launch.env["REF_DIR"] == model.folder
        assert launch.env["MODEL_ARGS_NAME"] == "qwen2.5-1.5B"
        at = launch.command.index("--rotary-base")
        assert launch.command[at + 1] == "1000000"
        assert launch.env["RUN_DIR"].startswith("runs/learn_1gpu_1.5b_")
    assert [s for s in sized if s.name in ("data", "cache")] == [
        s for s in default if s.name in ("data", "cache")]
    config = json.loads((ROOT / model.config).read_text())
    assert (config["rope_theta"], config["num_hidden_layers"]) == (1e6, 28)
