"""What an evaluation's cases are keyed by (`evaluate.provenance`): run-local addresses, thread
counts and locations leave the config digest alone, outcome settings change it; a served
policy is digested by its URL, model name and tokenizer files; an edited source file (a solver
prompt, the hand-written skill cards) or a changed game or task file an evaluated row points to
changes the key, and an unchanged tree keeps it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from evolving_rl.config import Config, parse_config
from evolving_rl.domains.registry import DOMAINS
from evolving_rl.evaluate import provenance
from evolving_rl.evaluate.policies import PolicySpec
from evolving_rl.evaluate.provenance import (
    REFERENCES,
    SOURCE_ROOTS,
    code_files,
    eval_key,
    named_files_digest,
    outcome_settings,
    policy_digest,
    referenced_files,
)
from evolving_rl.retrieval.prepared import PreparedRow, read_split


def test_run_local_settings_leave_the_config_digest_alone():
    cfg = parse_config({})
    moved = parse_config({"retrieval": {"port": 9999, "log_dir": "elsewhere",
                                        "torch_threads": 7},
                          "alfworld": {"n_workers": 5, "prepared_dir": "other/prepared"}})
    assert outcome_settings(moved) == outcome_settings(cfg)
    changed = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, max_steps=3))
    assert outcome_settings(changed) != outcome_settings(cfg)


def test_a_served_policy_is_digested_by_url_model_and_tokenizer(tmp_path):
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    spec = PolicySpec("openai", url="http://h:1", tokenizer=str(tokenizer), model="m")
    first = policy_digest(spec)
    assert policy_digest(dataclasses.replace(spec, model="n")) != first
    assert policy_digest(dataclasses.replace(spec, url="http://h:2")) != first
    (tokenizer / "tokenizer.json").write_text('{"v": 2}')
    assert policy_digest(spec) != first


def _alfworld_config(tmp_path: Path) -> Config:
    """Two evaluated games and one training game, each a trial folder under the data root."""
    root, prepared = tmp_path / "games", tmp_path / "prepared"
    prepared.mkdir()
    for split in ("train", "valid_unseen"):
        game = f"json_2.1.1/{split}/pick-0/trial_0/game.tw-pddl"
        (root / game).parent.mkdir(parents=True)
        (root / game).write_text(f"{split} game")
        (root / game).with_name("traj_data.json").write_text('{"task_type": "pick"}')
        row = {"id": f"{split}-0", "question": "q", "metadata": {"game": game}}
        (prepared / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    return parse_config({"alfworld": {"data_root": str(root), "prepared_dir": str(prepared)}})


def _key(cfg: Config, tmp_path: Path) -> str:
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    spec = PolicySpec("local", path=str(tmp_path / "ckpt"))
    rows = {"valid_unseen": read_split(cfg.alfworld.prepared_dir, "valid_unseen")}
    return eval_key(cfg, spec, rows, "train", "train", None).key


def test_a_changed_game_file_of_an_evaluated_row_changes_the_key(tmp_path):
    cfg = _alfworld_config(tmp_path)
    first = _key(cfg, tmp_path)
    assert _key(cfg, tmp_path) == first  # an unchanged tree keeps it
    trial = tmp_path / "games/json_2.1.1/valid_unseen/pick-0/trial_0"
    (trial / "traj_data.json").write_text('{"task_type": "pick", "walkthrough": ["go"]}')
    second = _key(cfg, tmp_path)
    assert second != first
    (trial / "game.tw-pddl").write_text("valid_unseen game, edited")
    assert _key(cfg, tmp_path) not in (first, second)
    (tmp_path / "games/json_2.1.1/train/pick-0/trial_0/game.tw-pddl").write_text("not evaluated")
    assert _key(cfg, tmp_path) == _key(cfg, tmp_path)
    rows = read_split(cfg.alfworld.prepared_dir, "valid_unseen")
    names = [name for name, _path in referenced_files(cfg, rows)]
    assert names == ["json_2.1.1/valid_unseen/pick-0/trial_0/game.tw-pddl",
                     "json_2.1.1/valid_unseen/pick-0/trial_0/traj_data.json"]
    outside = PreparedRow("x", "q", "q", {"game": "/"})  # never a walk of the whole disk
    assert referenced_files(cfg, [*rows, outside]) == referenced_files(cfg, rows)


def test_a_changed_mind2web_task_file_changes_the_key(tmp_path):
    root, prepared = tmp_path / "mind2web", tmp_path / "prepared"
    (root / "data/test_task").mkdir(parents=True)
    prepared.mkdir()
    task_file = root / "data/test_task/test_task_0.json"
    task_file.write_text("[]")
    row = {"id": "a1", "question": "q",
           "metadata": {"source_file": "data/test_task/test_task_0.json", "task_index": 0}}
    (prepared / "test_task.jsonl").write_text(json.dumps(row) + "\n")
    cfg = parse_config({"environment": "mind2web",
                        "mind2web": {"data_root": str(root), "prepared_dir": str(prepared)}})
    rows = read_split(prepared, "test_task")
    assert [name for name, _ in referenced_files(cfg, rows)] == [
        "data/test_task/test_task_0.json"]
    before = named_files_digest(referenced_files(cfg, rows))
    task_file.write_text('[{"annotation_id": "a1"}]')
    assert named_files_digest(referenced_files(cfg, rows)) != before


def test_every_registered_environment_names_the_files_its_rows_point_to():
    assert set(DOMAINS) <= set(REFERENCES)


def _package_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "src" / "evolving_rl"
    shutil.copytree(SOURCE_ROOTS[0], copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.mark.parametrize("edited", ["domains/alfworld.py",
                                    "domains/data/alfworld_written_skills.json"])
def test_an_edited_prompt_or_written_skill_changes_the_key(tmp_path, monkeypatch, edited):
    """The solver's prompt module and the hand-written cards, edited in a copy of the package."""
    cfg = _alfworld_config(tmp_path)
    copy = _package_copy(tmp_path)
    monkeypatch.setattr(provenance, "SOURCE_ROOTS", (copy, *SOURCE_ROOTS[1:]))
    first = _key(cfg, tmp_path)
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.cpython.pyc").write_bytes(b"compiled")
    (copy / "domains" / ".#alfworld.py").write_text("an editor's")
    assert _key(cfg, tmp_path) == first  # compiled and hidden files are no source
    path = copy / edited
    text = path.read_text(encoding="utf-8")
    edit = text.replace("You are an agent", "You act as an agent", 1) if path.suffix == ".py" \
        else text.replace('"', "'", 1)
    assert edit != text
    path.write_text(edit, encoding="utf-8")
    assert _key(cfg, tmp_path) != first


def test_the_code_digest_reads_every_file_an_episode_can_read():
    """Every file of the packages is digested but the licence notices of the GGUF models."""
    names = {name for name, _path in code_files()}
    assert {"evolving_rl/domains/alfworld.py", "evolving_rl/domains/data/"
            "alfworld_written_skills.json", "evolving_rl/pipeline/evaluation.py",
            "env/alfworld/engine.py"} <= names
    left = [path.relative_to(root).as_posix() for root in SOURCE_ROOTS
            for path in root.rglob("*") if path.is_file() and "__pycache__" not in path.parts
            and f"{root.name}/{path.relative_to(root).as_posix()}" not in names]
    assert all(name.startswith("local/notices/") for name in left), left


def test_probe_rows_point_to_no_file():
    cfg = parse_config({"environment": "probe"})
    row = PreparedRow("p1", "q", "q", {"family": 0})
    assert referenced_files(cfg, [row]) == []
