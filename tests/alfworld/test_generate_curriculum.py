"""The generator's curriculum knobs from the config: task types and room sizes reach the games."""

from __future__ import annotations

import json
import re
import typing

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("fast_downward")

from env.alfworld.generate import DATA_DIR, main  # noqa: E402
from env.alfworld.prepare import TASK_TYPES  # noqa: E402
from env.alfworld.service import prepare_data  # noqa: E402
from evolving_rl.config import parse_config  # noqa: E402
from evolving_rl.config.loader import ConfigError  # noqa: E402
from evolving_rl.config.schema import AlfworldTaskType  # noqa: E402


def test_the_schema_knows_the_six_task_types():
    assert set(typing.get_args(AlfworldTaskType)) == set(TASK_TYPES)
    with pytest.raises(ConfigError, match="generator_task_types"):
        parse_config({"alfworld": {"generator_task_types": ["pick_and_fly"]}})


def test_prepare_data_generates_only_the_configured_types_and_sizes(tmp_path):
    cfg = parse_config({
        "alfworld": {"data_root": str(tmp_path / "data"),
                     "prepared_dir": str(tmp_path / "data" / "prepared"),
                     "generator_task_types": ["look_at_obj_in_light"],
                     "generator_max_receptacles": 2, "generator_max_objects": 1},
        "local": {"games_per_type": 1, "generator_workers": 1}})
    prepare_data(cfg)
    games = sorted((tmp_path / "data" / DATA_DIR).glob("*/*/*/game.tw-pddl"))
    assert len(games) == 3  # one per split
    assert {g.parts[-3].split("-")[0] for g in games} == {"look_at_obj_in_light"}
    manifest = json.loads((tmp_path / "data" / "prepared" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["games"] == 1
    for game in games:
        data = json.loads(game.read_text())
        assert 0 < len(data["walkthrough"]) <= 4  # go, take, go, use
        declared = [line.split()[-1] for line in data["pddl_problem"].splitlines()
                    if re.fullmatch(r"\s+[A-Za-z]\S* - (receptacle|object)", line)]
        # only what the task needs: where the target starts and the lamp's host; the target and
        # the lamp
        assert sorted(declared) == ["object", "object", "receptacle", "receptacle"]


def test_the_cli_refuses_an_unknown_type(tmp_path):
    with pytest.raises(SystemExit, match="unknown task types"):
        main(["--out", str(tmp_path), "--types", "pick_and_place_simple,pick_and_fly"])
