"""The one reader of prepared split files: rows, validation, and where an environment's live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolving_rl.config import parse_config
from evolving_rl.retrieval.prepared import (
    PreparedDataError,
    PreparedRow,
    environment_prepared_dir,
    prepared_dir_for,
    read_prepared,
    read_prepared_dir,
    read_split,
    round_robin,
    split_names,
)

ROW = {"id": "train/a", "question": "put a mug in desk.", "prompt": "put a mug in desk.",
       "metadata": {"split": "train", "task_type": "pick", "game": "g.tw-pddl"}}


def write_rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "\n", encoding="utf-8")


def test_rows_round_trip_as_the_json_objects_they_are(tmp_path):
    no_prompt = {"id": "b", "question": "open the box."}
    write_rows(tmp_path / "train.jsonl", [ROW, no_prompt])
    rows = read_split(tmp_path, "train")
    assert [row.as_dict() for row in rows] == [
        ROW, {"id": "b", "question": "open the box.", "prompt": "open the box.", "metadata": {}}]
    assert rows[0] == PreparedRow("train/a", ROW["question"], ROW["prompt"], ROW["metadata"])
    assert (rows[0].task_type, rows[1].task_type) == ("pick", "")
    assert read_prepared(tmp_path / "train.jsonl") == rows


def test_a_directory_reads_every_split_or_the_named_ones(tmp_path):
    write_rows(tmp_path / "valid.jsonl", [ROW])
    write_rows(tmp_path / "train.jsonl", [ROW, {**ROW, "id": "train/b"}])
    (tmp_path / "manifest.json").write_text("{}")
    assert split_names(tmp_path) == ["train", "valid"]
    assert {name: len(rows) for name, rows in read_prepared_dir(tmp_path).items()} == {
        "train": 2, "valid": 1}
    assert list(read_prepared_dir(tmp_path, ["valid"])) == ["valid"]


@pytest.mark.parametrize("record, message", [
    ({**ROW, "prompt": 3}, "'prompt' must be a string"),
    ({**ROW, "metadata": "x"}, "'metadata' must be an object"),
    ({**ROW, "question": "  "}, "'question'"),
])
def test_bad_rows_name_file_and_line(tmp_path, record, message):
    write_rows(tmp_path / "test.jsonl", [ROW, record])
    with pytest.raises(PreparedDataError, match=f"test.jsonl:2: {message}"):
        read_split(tmp_path, "test")


def test_missing_files_are_errors(tmp_path):
    with pytest.raises(PreparedDataError, match="not found"):
        read_prepared(tmp_path / "nope.jsonl")
    with pytest.raises(PreparedDataError, match="no prepared <split>.jsonl"):
        read_prepared_dir(tmp_path)


def test_the_prepared_dir_is_the_environments_unless_retrieval_names_one():
    for environment in ("alfworld", "mind2web"):
        cfg = parse_config({"environment": environment,
                            environment: {"prepared_dir": f"data/{environment}/p"}})
        assert str(prepared_dir_for(cfg)) == f"data/{environment}/p"
    cfg = parse_config({"environment": "mind2web", "retrieval": {"prepared_dir": "elsewhere"}})
    assert str(prepared_dir_for(cfg)) == "elsewhere"
    assert environment_prepared_dir(cfg) == Path(cfg.mind2web.prepared_dir)


def test_round_robin_takes_task_types_in_turn():
    rows = [PreparedRow(id=f"{t}{i}", question="q", prompt="q", metadata={"task_type": t})
            for t, n in (("b", 3), ("a", 1), ("c", 2)) for i in range(n)]
    assert [r["id"] for r in round_robin(rows, 5)] == ["a0", "b0", "c0", "b1", "c1"]
    assert [r["id"] for r in round_robin(rows, None)] == [r.id for r in rows]
    assert round_robin(rows, 0) == []
