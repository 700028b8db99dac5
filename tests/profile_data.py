"""The commands of a one-GPU slime profile's recipe, run as written in a sandbox checkout.

`profile_commands(config, script)`: the steps of the recipe profile of `config`
(src/evolving_rl/slime_bridge/recipe.py, the one source of those commands) that run `script`, as
argument lists with their environment. A
`DataSandbox` is a folder laid out like the repo for the data scripts: `scripts/<env>/`,
`scripts/lib/`, the `env` package (a link to this checkout's) and the profile's config, copied;
its `scripts/setup_env.sh` does nothing, since this session's venv (`VENV`) is the environment.
`run` executes a profile command there unchanged, so the relative paths of the config (data root,
prepared splits, retrieval cache) land in the sandbox. `launch_data(config, script)`: the prepared
folder and the splits the profile's launches of a train script read; `profile_splits`: with the
evaluation's and retrieval's, every split the profile names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from evolving_rl.config import load_config
from evolving_rl.slime_bridge.recipe import PROFILES, plan

ROOT = Path(__file__).resolve().parents[1]
# Where the data scripts would look instead of the config's data root: not inherited.
DATA_VARIABLES = ("ALFWORLD_DATA", "MIND2WEB_DATA", "MIND2WEB_ZIP_PASSWORD")


@dataclass(frozen=True)
class ProfileCommand:
    """A step of a profile's recipe: its environment and its words from `bash`."""

    env: dict[str, str]
    argv: list[str]

    def option(self, name: str) -> list[str]:
        """The words after option `name` up to the next option."""
        start = self.argv.index(name) + 1
        end = next((i for i in range(start, len(self.argv)) if self.argv[i].startswith("--")),
                   len(self.argv))
        return self.argv[start:end]


def profile_commands(config: Path, script: str) -> list[ProfileCommand]:
    """Every step of the recipe profile of `config` that runs `script`, in order."""
    [profile] = [p for p in PROFILES.values() if ROOT / p.config == config]
    return [ProfileCommand(dict(step.env), list(step.command)) for step in plan(profile)
            if step.command[:2] == ("bash", script)]


def prepared_rows(prepared_dir: Path, split: str) -> list[dict]:
    """The rows of `<prepared_dir>/<split>.jsonl`."""
    text = (prepared_dir / f"{split}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def script_default(script: str, name: str) -> str:
    """The default a train script gives its variable `name` (`NAME="${NAME:-default}"`)."""
    text = (ROOT / script).read_text()
    match = re.search(rf'^{name}="\$\{{{name}:-([^}}]*)\}}"', text, flags=re.M)
    assert match, f"{script} has no default {name}"
    return match.group(1).replace("$ROOT/", "")


def launch_data(config: Path, script: str) -> tuple[str, set[str]]:
    """(PREPARED_DIR, the train and evaluation splits) of the profile's launches of `script`."""
    launches = profile_commands(config, script)
    assert launches, f"{config.name}'s profile has no launch of {script}"
    folders, splits = set(), set()
    for launch in launches:
        value = {name: launch.env.get(name) or script_default(script, name)
                 for name in ("PREPARED_DIR", "TRAIN_SPLIT", "EVAL_SPLITS")}
        folders.add(value["PREPARED_DIR"])
        splits |= {value["TRAIN_SPLIT"], *value["EVAL_SPLITS"].split()}
    assert len(folders) == 1, folders
    return folders.pop(), splits


def profile_splits(config: Path, train_script: str) -> tuple[str, set[str]]:
    """(the launches' PREPARED_DIR, every split the profile names): its launches' train and
    evaluation splits, the --splits of its eval.sh step (beside the train script),
    the config's pipeline.retrieval_split and `train`, where the evaluation retrieves by default
    (`python -m evolving_rl.evaluate --help`)."""
    prepared_dir, splits = launch_data(config, train_script)
    [evaluation] = profile_commands(config, f"{Path(train_script).parent}/eval.sh")
    retrieval = load_config(config).pipeline.retrieval_split
    return prepared_dir, {*splits, *evaluation.option("--splits"), retrieval, "train"}


class DataSandbox:
    """A repo-shaped folder in which the data scripts of `env_name` run as written."""

    def __init__(self, folder: Path, env_name: str, config: Path) -> None:
        self.root = folder
        scripts = folder / "scripts"
        shutil.copytree(ROOT / "scripts" / env_name, scripts / env_name)
        shutil.copytree(ROOT / "scripts" / "lib", scripts / "lib")
        (scripts / "setup_env.sh").write_text("exit 0\n")
        (folder / "env").symlink_to(ROOT / "env")
        (folder / "configs").mkdir()
        shutil.copy(config, folder / "configs" / config.name)

    def run(self, argv: list[str], env: dict[str, str] | None = None,
            timeout_s: int = 600) -> subprocess.CompletedProcess:
        """Run `argv` in the sandbox with this session's venv; fails on a non-zero exit."""
        venv = Path(sys.executable).parent.parent
        inherited = {k: v for k, v in os.environ.items() if k not in DATA_VARIABLES}
        full_env = {**inherited, "VENV": str(venv), "HF_HUB_OFFLINE": "1", **(env or {})}
        result = subprocess.run(argv, cwd=self.root, env=full_env, capture_output=True,
                                text=True, timeout=timeout_s)
        assert result.returncode == 0, (argv, result.stderr[-3000:])
        return result
