"""The ALFWorld game generator: layout, file schema, determinism, proof in the real engine."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("fast_downward")

from env.alfworld.gen_scene import split_scenes  # noqa: E402
from env.alfworld.generate import DATA_DIR, REPORT_FILE, SPLITS, generate_dataset  # noqa: E402
from env.alfworld.planner import replay  # noqa: E402
from env.alfworld.prepare import TASK_TYPES  # noqa: E402

PER_SPLIT = {"train": 1, "valid_seen": 1, "valid_unseen": 1}
SEED = 7
FOLDER = re.compile(
    r"^(?P<type>[a-z_]+)-(?P<obj>[A-Za-z]+)-None-(?P<recep>[A-Za-z]+)-(?P<scene>\d+)$")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("alfworld_gen")
    report = generate_dataset(root, PER_SPLIT, seed=SEED, workers=2)
    return root, report


def _games(root: Path, split: str) -> list[Path]:
    return sorted((root / DATA_DIR / split).glob("*/trial_*"))


def test_every_job_produced_a_game(dataset):
    root, report = dataset
    assert report.missing == 0
    assert report.games_per_split == {split: len(TASK_TYPES) for split in SPLITS}
    assert set(report.by_type) == set(TASK_TYPES)
    for stats in report.by_type.values():
        assert stats.succeeded == len(SPLITS)
        assert stats.attempted == stats.succeeded + sum(stats.discarded.values())
    saved = json.loads((root / REPORT_FILE).read_text())
    assert saved["missing"] == 0 and set(saved["by_type"]) == set(TASK_TYPES)
    assert not (root / ".generate_tmp").exists()


def test_layout_and_schema(dataset):
    root, _ = dataset
    for split in SPLITS:
        trials = _games(root, split)
        assert sorted(FOLDER.match(t.parent.name)["type"] for t in trials) == sorted(TASK_TYPES)
        for trial in trials:
            assert sorted(p.name for p in trial.iterdir()) == ["game.tw-pddl", "traj_data.json"]
            game = json.loads((trial / "game.tw-pddl").read_text())
            traj = json.loads((trial / "traj_data.json").read_text())
            assert list(game) == ["pddl_domain", "grammar", "pddl_problem", "solvable",
                                  "walkthrough"]
            assert game["solvable"] is True and game["walkthrough"]
            assert "UNKNOWN GOAL" not in game["grammar"]
            sentence = traj["turk_annotations"]["anns"][0]["task_desc"]
            assert f"Your task is to: {sentence}." in game["grammar"]
            match = FOLDER.match(trial.parent.name)
            assert traj["task_type"] == match["type"]
            params = traj["pddl_params"]
            assert set(params) == {"object_target", "parent_target", "toggle_target",
                                   "mrecep_target", "object_sliced"}
            assert params["object_target"] == match["obj"]
            assert match["recep"] == (params["toggle_target"] or params["parent_target"])
            assert traj["scene"]["scene_num"] == int(match["scene"])


def test_problem_pitfalls(dataset):
    """Basins named after their fixture; the agent starts away from every receptacle."""
    root, _ = dataset
    for split in SPLITS:
        for trial in _games(root, split):
            problem = json.loads((trial / "game.tw-pddl").read_text())["pddl_problem"]
            assert not re.search(r"\b(SinkBasin|BathtubBasin)_bar_", problem)
            start = re.search(r"\(atLocation agent1 (\S+)\)", problem).group(1)
            receptacle_locations = re.findall(r"\(receptacleAtLocation \S+ (\S+)\)", problem)
            assert start not in receptacle_locations
            assert len(set(receptacle_locations)) == len(receptacle_locations)


def test_unseen_scenes_are_held_out(dataset):
    root, _ = dataset

    def scenes(split):
        return {json.loads((t / "traj_data.json").read_text())["scene"]["scene_num"]
                for t in _games(root, split)}

    assert scenes("valid_unseen") <= set(split_scenes("valid_unseen"))
    assert not scenes("valid_unseen") & (scenes("train") | scenes("valid_seen"))
    assert not set(split_scenes("valid_unseen")) & set(split_scenes("train"))


def test_walkthroughs_win_in_the_real_engine(dataset):
    root, _ = dataset
    for trial in _games(root, "train"):
        game = json.loads((trial / "game.tw-pddl").read_text())
        result = replay(str(trial / "game.tw-pddl"), game["walkthrough"])
        assert result.won, (trial, result)
        assert result.steps == len(game["walkthrough"])


def test_same_seed_same_bytes(dataset, tmp_path):
    root, _ = dataset
    again = generate_dataset(tmp_path, {"train": 1}, seed=SEED, workers=1,
                             task_types=("pick_two_obj_and_place",))
    assert again.missing == 0
    [trial] = _games(tmp_path, "train")
    original = root / trial.relative_to(tmp_path)
    for name in ("game.tw-pddl", "traj_data.json"):
        assert (trial / name).read_bytes() == (original / name).read_bytes()


def test_a_data_root_named_like_a_z_machine_game_still_plays(dataset, tmp_path):
    """TextWorld guesses a Z-machine game from `.z1`-`.z8` anywhere in a path; the replay names
    its backend (issue 60, item 7)."""
    root, _ = dataset
    trial = _games(root, "valid_seen")[0]
    copy = Path(shutil.copytree(trial, tmp_path / "runs.z5" / "data.z8" / trial.name))
    game = json.loads((copy / "game.tw-pddl").read_text())
    result = replay(str(copy / "game.tw-pddl"), game["walkthrough"])
    assert result.won and result.steps == len(game["walkthrough"])
