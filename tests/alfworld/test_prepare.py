"""ALFWorld data preparation: splits, rows, discovery rules, idempotency, missing-data message;
subset splits (`alfworld.subsets`), among them the one-GPU profile's valid_small at the counts its
recipe's data command generates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from env.alfworld.generate import _parse_per_type
from env.alfworld.prepare import (
    DATA_DIR,
    SEEN_TYPES,
    TASK_TYPES,
    UNSEEN_TYPES,
    MissingDataError,
    SubsetError,
    main,
    prepare,
    task_sentence,
)
from evolving_rl.config import ConfigError, load_config, parse_config
from evolving_rl.config.schema import AlfworldSplit, AlfworldSubset
from evolving_rl.retrieval.prepared import PreparedData, PreparedDataError, read_split
from tests.profile_data import ROOT, profile_commands

OUTPUTS = ("train", "train_seen", "train_unseen", "valid_seen", "valid_unseen")
ONE_GPU = ROOT / "configs/alfworld_1gpu.yaml"
GRAMMAR = '"task": [{"rhs": "Your task is to: UNKNOWN GOAL."}]'


def _write_game(root: Path, split: str, folder: str, task_type: str, sentence: str,
                solvable: bool = True) -> None:
    trial = root / DATA_DIR / split / folder / "trial_T1"
    trial.mkdir(parents=True)
    (trial / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    game = {"grammar": GRAMMAR.replace("UNKNOWN GOAL", sentence), "solvable": solvable}
    (trial / "game.tw-pddl").write_text(json.dumps(game))


@pytest.fixture()
def fake_root(tmp_path) -> Path:
    """Hand-written game folders covering every type and every discovery rule."""
    root = tmp_path / "data"
    types = sorted(SEEN_TYPES | UNSEEN_TYPES)
    for i, task_type in enumerate(types):
        _write_game(root, "train", f"{task_type}-Apple-None-Fridge-{i}", task_type, f"task {i}")
    _write_game(root, "valid_seen", "pick_and_place_simple-Mug-None-Desk-7",
                "pick_and_place_simple", "put a mug in desk")
    _write_game(root, "valid_unseen", "pick_two_obj_and_place-CD-None-Safe-301",
                "pick_two_obj_and_place", "put two cd in safe")
    _write_game(root, "train", "unsolvable-x", "pick_and_place_simple", "no", solvable=False)
    _write_game(root, "train", "other-x", "pick_and_place_with_movable_recep", "no")
    _write_game(root, "train", "pick_and_place_simple-AppleSliced-None-Fridge-1",
                "pick_and_place_simple", "no")
    return root


def _rows(prepared: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (prepared / f"{name}.jsonl").read_text().splitlines()]


def test_splits_rows_and_rules(fake_root, tmp_path):
    prepared = tmp_path / "prepared"
    manifest = prepare(fake_root, prepared)
    counts = {name: manifest["splits"][name]["games"] for name in OUTPUTS}
    assert counts == {"train": 6, "train_seen": 4, "train_unseen": 2, "valid_seen": 1,
                      "valid_unseen": 1}
    train = _rows(prepared, "train")
    assert {r["metadata"]["task_type"] for r in _rows(prepared, "train_seen")} == SEEN_TYPES
    assert {r["metadata"]["task_type"] for r in _rows(prepared, "train_unseen")} == UNSEEN_TYPES
    [valid] = _rows(prepared, "valid_seen")
    assert valid["question"] == valid["prompt"] == "put a mug in desk."
    assert valid["id"] == "valid_seen/pick_and_place_simple-Mug-None-Desk-7/trial_T1"
    assert valid["metadata"] == {
        "split": "valid_seen", "task_type": "pick_and_place_simple", "environment": "alfworld",
        "game": f"{DATA_DIR}/valid_seen/pick_and_place_simple-Mug-None-Desk-7/trial_T1/"
                "game.tw-pddl"}
    ids = [r["id"] for name in ("train", "valid_seen", "valid_unseen")
           for r in _rows(prepared, name)]
    assert len(ids) == len(set(ids))
    for row in train:
        assert (fake_root / row["metadata"]["game"]).is_file()


def test_idempotent(fake_root, tmp_path):
    prepared = tmp_path / "prepared"
    prepare(fake_root, prepared)
    first = {p.name: p.read_bytes() for p in prepared.iterdir()}
    written = {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()}
    prepare(fake_root, prepared)
    assert {p.name: p.read_bytes() for p in prepared.iterdir()} == first
    assert not [p for p in prepared.iterdir() if p.name.startswith(".")]
    # unchanged data: nothing rewritten (a rerun reuses the prepared splits as they are)
    assert {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()} == written


def test_missing_data_names_both_ways(tmp_path):
    with pytest.raises(MissingDataError) as err:
        prepare(tmp_path / "nothing", tmp_path / "prepared")
    assert "alfworld-download" in str(err.value)
    assert "scripts/alfworld/prepare_data.sh --generate" in str(err.value)


def test_cli_reads_config_then_env(fake_root, tmp_path, monkeypatch):
    config = tmp_path / "cfg.yaml"
    prepared = tmp_path / "out"
    config.write_text(f"alfworld:\n  data_root: {tmp_path / 'missing'}\n"
                      f"  prepared_dir: {prepared}\n")
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(SystemExit, match="alfworld-download"):
        main(["--config", str(config)])
    monkeypatch.setenv("ALFWORLD_DATA", str(fake_root))
    main(["--config", str(config)])
    assert len(_rows(prepared, "train")) == 6


def test_task_sentence_parsing():
    assert task_sentence('"rhs": "Your task is to: put a apple in fridge."') == \
        "put a apple in fridge."
    assert task_sentence("no task here") is None


def test_prepares_generated_games(tmp_path):
    """Same code path on real generated games: rows point at playable game files."""
    pytest.importorskip("fast_downward")
    from env.alfworld.generate import generate_dataset

    root = tmp_path / "gen"
    types = ("pick_and_place_simple", "look_at_obj_in_light")
    report = generate_dataset(root, {"train": 1, "valid_seen": 1, "valid_unseen": 1}, seed=3,
                              workers=2, task_types=types)
    assert report.missing == 0
    manifest = prepare(root, tmp_path / "prepared")
    assert manifest["splits"]["train"]["by_task_type"] == {t: 1 for t in types}
    assert manifest["splits"]["train_seen"]["games"] == 1
    assert manifest["splits"]["train_unseen"]["games"] == 1
    for name in ("train", "valid_seen", "valid_unseen"):
        for row in _rows(tmp_path / "prepared", name):
            game = json.loads((root / row["metadata"]["game"]).read_text())
            assert f"Your task is to: {row['question']}" in game["grammar"]
            assert not row["question"].startswith("Your task is to")


def _games_per_type(root: Path, counts: dict[str, int]) -> None:
    """`counts[split]` hand-written games of every task type in each split."""
    for split, count in counts.items():
        for task_type in TASK_TYPES:
            for i in range(count):
                _write_game(root, split, f"{task_type}-Obj-None-Recep-{i}", task_type,
                            f"{task_type} {i}")


def test_subsets_are_the_first_games_of_their_split(tmp_path):
    root = tmp_path / "data"
    _games_per_type(root, {"train": 1, "valid_unseen": 3})
    subsets = (AlfworldSubset("valid_short", "valid_unseen", 5),
               AlfworldSubset("train_two", "train_seen", 2))
    manifest = prepare(root, tmp_path / "prepared", subsets)
    assert list(manifest["splits"]) == [*get_args(AlfworldSplit), "valid_short", "train_two"]
    unseen = _rows(tmp_path / "prepared", "valid_unseen")
    assert _rows(tmp_path / "prepared", "valid_short") == unseen[:5]
    assert [r["id"] for r in unseen] == sorted(r["id"] for r in unseen)
    assert _rows(tmp_path / "prepared", "train_two") == _rows(tmp_path / "prepared",
                                                              "train_seen")[:2]
    assert manifest["splits"]["valid_short"] == {
        "games": 5, "by_task_type": {"look_at_obj_in_light": 3, "pick_and_place_simple": 2}}


def test_a_subset_larger_than_its_split_fails_before_writing(tmp_path):
    root = tmp_path / "data"
    _games_per_type(root, {"train": 1, "valid_unseen": 1})
    with pytest.raises(SubsetError, match="first 7 games of valid_unseen, which holds 6"):
        prepare(root, tmp_path / "prepared", (AlfworldSubset("valid_small", "valid_unseen", 7),))
    assert not (tmp_path / "prepared").exists()


@pytest.mark.parametrize("subsets, words", [
    ([{"name": "valid_seen", "split": "valid_unseen", "games": 2}], "names a prepared split"),
    ([{"name": "a", "split": "train", "games": 1}, {"name": "a", "split": "train", "games": 2}],
     "another subset"),
    ([{"name": "../x", "split": "train", "games": 1}], "not a plain file name"),
    ([{"name": "x", "split": "valid", "games": 1}], "must be one of"),
    ([{"name": "x", "split": "train", "games": 0}], ">= 1"),
])
def test_subsets_are_validated(subsets, words):
    with pytest.raises(ConfigError, match="alfworld.subsets") as err:
        parse_config({"alfworld": {"subsets": subsets}})
    assert words in str(err.value)


def test_the_one_gpu_data_command_makes_valid_small_as_its_profile_says(tmp_path):
    """The recipe profile's --per-type counts over six types (hand-written games, no generation):
    valid_small is the first 8 of valid_unseen's 24, 4 look_at_obj_in_light and 4
    pick_and_place_simple."""
    [command] = profile_commands(ONE_GPU, "scripts/alfworld/prepare_data.sh")
    counts = _parse_per_type(command.option("--per-type")[0])
    assert counts == {"train": 8, "valid_seen": 2, "valid_unseen": 4}
    _games_per_type(tmp_path / "data", counts)
    manifest = prepare(tmp_path / "data", tmp_path / "prepared",
                       load_config(ONE_GPU).alfworld.subsets)
    assert manifest["splits"]["valid_small"] == {
        "games": 8, "by_task_type": {"look_at_obj_in_light": 4, "pick_and_place_simple": 4}}
    assert manifest["splits"]["valid_unseen"]["games"] == 24


def _drop_last_line(path: Path) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))


def test_a_split_that_lost_lines_is_refused_naming_the_manifest(fake_root, tmp_path):
    prepared = tmp_path / "prepared"
    prepare(fake_root, prepared)
    cfg = parse_config({"alfworld": {"prepared_dir": str(prepared)}})
    assert len(PreparedData.read(cfg).split("train")) == 6
    _drop_last_line(prepared / "train.jsonl")  # 5 of 6 games left, each line still valid
    with pytest.raises(PreparedDataError) as refused:
        PreparedData.read(cfg)
    assert str(refused.value) == (
        f"{prepared / 'train.jsonl'} holds 5 lines but {prepared / 'manifest.json'} says 6: "
        "the file lost or gained lines since it was prepared; prepare the data again")
    prepare(fake_root, prepared)  # preparing again restores it
    assert len(PreparedData.read(cfg).split("train")) == 6


def test_a_split_changed_in_place_is_refused(fake_root, tmp_path):
    prepared = tmp_path / "prepared"
    prepare(fake_root, prepared)
    path = prepared / "valid_unseen.jsonl"
    path.write_text(path.read_text().replace("put two cd in safe", "put two cd in box!"))
    with pytest.raises(PreparedDataError, match="its sha256 differs"):
        read_split(prepared, "valid_unseen")
