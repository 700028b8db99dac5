"""Mind2Web preparation: the official layout (train files + test zip, at the root or in data/) to
prompt JSONL splits; empty splits, duplicate zips, and decryption by unzip or by zipfile."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from env.mind2web import service, testzip, unzip_tool
from env.mind2web.generate import GenerateSpec, generate
from env.mind2web.prepare import (
    MAX_ID_CHARS,
    SPLITS,
    EmptySplitError,
    LinkedDataError,
    MissingDataError,
    TwoLayoutsError,
    main,
    prepare,
)
from env.mind2web.testzip import (
    PASSWORD_ENV,
    DuplicateSplitError,
    StaleSplitError,
    ZipPasswordError,
)
from evolving_rl.config import parse_config
from tests.profile_data import DATA_VARIABLES, DataSandbox

ROOT = Path(__file__).resolve().parents[2]
METADATA_KEYS = {"annotation_id", "website", "domain", "subdomain", "task_type", "source_file",
                 "task_index", "n_steps", "split"}
PEAK_RSS = """
import resource, sys
from env.mind2web.prepare import prepare
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
prepare(sys.argv[1], sys.argv[2], required=("train",))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(before * 1024, after * 1024)
"""


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def outputs(prepared_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(prepared_dir.iterdir())}


@pytest.fixture
def fresh_root(mind2web_generated, tmp_path) -> Path:
    return Path(shutil.copytree(mind2web_generated.root, tmp_path / "root"))


def test_rows_and_splits(mind2web_prepared, mind2web_generated):
    splits = {name: read_rows(mind2web_prepared.prepared_dir / f"{name}.jsonl")
              for name in (*SPLITS, "all")}
    assert {s: len(splits[s]) for s in SPLITS} == mind2web_generated.counts
    assert splits["all"] == [row for s in SPLITS for row in splits[s]]
    for split in SPLITS:
        for row in splits[split]:
            assert set(row) == {"id", "question", "prompt", "metadata"}
            meta = row["metadata"]
            assert set(meta) == METADATA_KEYS and meta["split"] == split
            assert row["id"] == meta["annotation_id"] and row["prompt"] == row["question"]
            assert meta["task_type"] == f"{meta['domain']}/{meta['subdomain']}"
            assert meta["source_file"].startswith(f"data/{split}/")


def test_rows_point_at_their_task(mind2web_prepared):
    for row in read_rows(mind2web_prepared.prepared_dir / "all.jsonl"):
        meta = row["metadata"]
        tasks = json.loads((mind2web_prepared.root / meta["source_file"]).read_text())
        task = tasks[meta["task_index"]]
        assert task["annotation_id"] == row["id"]
        assert task["confirmed_task"] == row["question"]
        assert len(task["actions"]) == meta["n_steps"]
        assert (task["website"], task["domain"]) == (meta["website"], meta["domain"])


def test_second_run_does_nothing_and_a_changed_input_reruns(fresh_root, tmp_path,
                                                             mind2web_spec):
    prepared = tmp_path / "prepared"
    prepare(fresh_root, prepared, password=mind2web_spec.password)
    first = outputs(prepared)
    extracted = {p: p.stat().st_mtime_ns for p in (fresh_root / "data").rglob("test_*/*.json")}
    prepare(fresh_root, prepared, password=None)  # extracted already: no password needed
    assert outputs(prepared) == first
    assert {p: p.stat().st_mtime_ns for p in extracted} == extracted
    train_file = next((fresh_root / "data" / "train").glob("*.json"))
    text = train_file.read_text()
    train_file.write_text(text)  # the same bytes, a new mtime: nothing to do
    prepare(fresh_root, prepared)
    assert outputs(prepared) == first
    tasks = json.loads(text)
    tasks[0]["confirmed_task"] += " now"
    train_file.write_text(json.dumps(tasks))
    prepare(fresh_root, prepared)
    assert outputs(prepared)["train.jsonl"] != first["train.jsonl"]
    assert not [p for p in prepared.iterdir() if ".tmp" in p.name]


def test_a_copied_data_folder_is_prepared_already_and_needs_no_password(fresh_root, tmp_path,
                                                                        mind2web_spec):
    """Prepared on a machine with the password and copied to a GPU node (new mtimes, another
    path, 2026-12-07): the zip is extracted already and the splits are up to date there."""
    prepared = tmp_path / "prepared"
    prepare(fresh_root, prepared, password=mind2web_spec.password)
    first = outputs(prepared)
    moved = Path(shutil.copytree(fresh_root, tmp_path / "node", copy_function=shutil.copyfile))
    prepare(moved, prepared, password=None)
    assert outputs(prepared) == first


def test_wrong_or_missing_password_says_what_to_do(fresh_root, tmp_path):
    with pytest.raises(ZipPasswordError, match=f"wrong password.*{PASSWORD_ENV}"):
        prepare(fresh_root, tmp_path / "prepared", password="not-it")
    with pytest.raises(ZipPasswordError, match=f"password-protected: set {PASSWORD_ENV}"):
        prepare(fresh_root, tmp_path / "prepared", password=None)
    assert not list((fresh_root / "data").glob("test_*"))
    assert not (tmp_path / "prepared").exists()


@pytest.mark.parametrize("zip_at", ["root", "data"])
def test_both_layouts_fill_all_four_splits(tmp_path, zip_at):
    spec = GenerateSpec(tasks=12, seed=3, distractors=2, tasks_per_file=1, password="pw",
                        zip_at=zip_at)
    data = generate(tmp_path / "root", spec)
    assert data.files[-1] == tmp_path / "root" / ("test.zip" if zip_at == "root"
                                                 else "data/test.zip")
    manifest = prepare(data.root, tmp_path / "prepared", password="pw")
    assert {s: manifest["splits"][s]["tasks"] for s in SPLITS} == data.counts
    assert all(data.counts[s] > 0 for s in SPLITS)
    for split in SPLITS:
        assert len(read_rows(tmp_path / "prepared" / f"{split}.jsonl")) == data.counts[split]


def test_an_empty_evaluation_split_fails_saying_where_it_looked(fresh_root, tmp_path):
    (fresh_root / "test.zip").unlink()
    with pytest.raises(EmptySplitError, match=r"test_task is empty.*data/test_task/\*\.json.*"
                       r"looked for at .*/\*\.zip .*data/\*\.zip; zips found: none"):
        prepare(fresh_root, tmp_path / "prepared")
    assert not (tmp_path / "prepared").exists()
    prepare(fresh_root, tmp_path / "train_only", required=("train",))  # the caller's choice
    assert read_rows(tmp_path / "train_only" / "train.jsonl")


def test_two_zips_holding_one_split_are_refused(fresh_root, tmp_path, mind2web_spec):
    shutil.copy(fresh_root / "test.zip", fresh_root / "data" / "test.zip")
    with pytest.raises(DuplicateSplitError, match="hold test_domain: keep one"):
        prepare(fresh_root, tmp_path / "prepared", password=mind2web_spec.password)


def _extracted(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted((root / "data").glob("test_*/*.json"))}


def test_unzip_and_zipfile_extract_the_same_files(tmp_path, monkeypatch, capsys):
    spec = GenerateSpec(tasks=12, seed=4, distractors=2, tasks_per_file=1, password="s3cret")
    generate(tmp_path / "gen", spec)
    if not unzip_tool.unzip_available():
        pytest.skip("no unzip / setsid on this machine")
    commands: list[list[str]] = []
    popen = unzip_tool.subprocess.Popen

    def spy(args, **kwargs):
        commands.append(list(args))
        return popen(args, **kwargs)

    fast, slow = (Path(shutil.copytree(tmp_path / "gen", tmp_path / n)) for n in ("u", "p"))
    monkeypatch.setattr(unzip_tool.subprocess, "Popen", spy)
    prepare(fast, tmp_path / "fast", password="s3cret")
    assert "decrypting test.zip with unzip" in capsys.readouterr().err
    assert commands and not any("s3cret" in arg for cmd in commands for arg in cmd)
    monkeypatch.setattr(testzip, "unzip_available", lambda: False)
    prepare(slow, tmp_path / "slow", password="s3cret")
    assert "decrypting test.zip in Python" in capsys.readouterr().err
    assert _extracted(fast) == _extracted(slow) and len(_extracted(fast)) > 3
    with pytest.raises(ZipPasswordError, match="wrong password"):
        prepare(Path(shutil.copytree(tmp_path / "gen", tmp_path / "w")), tmp_path / "w_out",
                password="not-it")


def test_missing_data_says_where_to_get_it(tmp_path):
    with pytest.raises(MissingDataError, match="osunlp/Mind2Web.*\n.*--generate"):
        prepare(tmp_path / "nothing", tmp_path / "prepared")


def test_cli_reads_the_config_data_root(fresh_root, tmp_path, monkeypatch, mind2web_spec,
                                        capsys):
    config = tmp_path / "web.yaml"
    prepared = tmp_path / "prepared"
    config.write_text(f"mind2web:\n  data_root: {fresh_root}\n  prepared_dir: {prepared}\n")
    monkeypatch.delenv("MIND2WEB_DATA", raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(SystemExit) as stopped:
        main(["--config", str(config)])
    assert stopped.value.code == 2 and PASSWORD_ENV in capsys.readouterr().err
    monkeypatch.setenv(PASSWORD_ENV, mind2web_spec.password)
    main(["--config", str(config)])
    assert len(read_rows(prepared / "all.jsonl")) == mind2web_spec.tasks
    with pytest.raises(SystemExit) as stopped:
        main(["--config", str(config), "--data-root", str(tmp_path / "nothing")])
    assert stopped.value.code == 2
    assert "error: no Mind2Web task files" in capsys.readouterr().err


def peak_rss(data_root: Path, prepared_dir: Path) -> tuple[int, int]:
    """(peak RSS after imports, peak RSS after prepare) of a fresh process, in bytes."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, str(data_root), str(prepared_dir)],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    before, after = done.stdout.split()
    return int(before), int(after)


def test_memory_stays_bounded_on_a_large_file(tmp_path):
    data = generate(tmp_path / "big", GenerateSpec(tasks=50, distractors=250, tasks_per_file=50,
                                                   splits=("train",)))
    size = data.files[0].stat().st_size
    assert size > 15e6
    before, after = peak_rss(data.root, tmp_path / "prepared")
    assert after - before < size / 3, (before, after, size)
    assert len(read_rows(tmp_path / "prepared" / "train.jsonl")) == 50


@pytest.mark.slow
def test_memory_under_500_mb_on_a_500_mb_split(tmp_path):
    data = generate(tmp_path / "huge", GenerateSpec(tasks=1400, distractors=250,
                                                    tasks_per_file=1400, splits=("train",)))
    size = data.files[0].stat().st_size
    assert size >= 500e6
    _, after = peak_rss(data.root, tmp_path / "prepared")
    assert after < 500e6, after


@pytest.mark.parametrize("target", ["inside", "outside"])
def test_a_linked_split_folder_is_refused_before_anything_is_written(fresh_root, tmp_path,
                                                                     target):
    train = fresh_root / "data" / "train"
    real = (fresh_root if target == "inside" else tmp_path) / "train_real"
    shutil.move(train, real)
    train.symlink_to(real)
    with pytest.raises(LinkedDataError, match=r"data/train \(under .*\) is a symbolic link"):
        prepare(fresh_root, tmp_path / "prepared", required=("train",))
    assert not (tmp_path / "prepared").exists()


def test_a_linked_task_file_is_refused(fresh_root, tmp_path):
    source = sorted((fresh_root / "data" / "train").glob("*.json"))[0]
    moved = shutil.move(source, tmp_path / source.name)
    source.symlink_to(moved)
    with pytest.raises(LinkedDataError,
                       match=f"data/train/{source.name} \\(under .*\\) is a symbolic link"):
        prepare(fresh_root, tmp_path / "prepared", required=("train",))


def test_a_split_gone_from_a_new_zip_stops_prepare_saying_so(fresh_root, tmp_path,
                                                              mind2web_spec):
    prepared = tmp_path / "prepared"
    prepare(fresh_root, prepared, password=mind2web_spec.password)
    before = outputs(prepared)
    spec = GenerateSpec(tasks=8, seed=9, distractors=2, password=mind2web_spec.password,
                        splits=("train", "test_task", "test_website"))
    shutil.copy(generate(tmp_path / "new", spec).root / "test.zip", fresh_root / "test.zip")
    with pytest.raises(StaleSplitError, match=r"data/test_domain .*no zip now holds it.*"
                                              r"test\.zip"):
        prepare(fresh_root, prepared, password=mind2web_spec.password)
    assert outputs(prepared) == before
    assert (fresh_root / "data" / "test_domain").is_dir()  # the user's to delete, not ours


def test_split_folders_at_the_root_are_a_layout_too(fresh_root, tmp_path, mind2web_generated,
                                                   mind2web_spec):
    shutil.move(fresh_root / "data" / "train", fresh_root / "train")
    shutil.rmtree(fresh_root / "data")
    manifest = prepare(fresh_root, tmp_path / "prepared", password=mind2web_spec.password)
    assert {s: manifest["splits"][s]["tasks"] for s in SPLITS} == mind2web_generated.counts
    assert not (fresh_root / "data").exists() and (fresh_root / "test_domain").is_dir()
    for split in SPLITS:
        for row in read_rows(tmp_path / "prepared" / f"{split}.jsonl"):
            assert row["metadata"]["source_file"].startswith(f"{split}/")


def test_a_missing_train_split_stops_before_the_zip_is_extracted(fresh_root, tmp_path,
                                                                  mind2web_spec):
    shutil.rmtree(fresh_root / "data" / "train")
    with pytest.raises(EmptySplitError, match=r"split train is empty: no task in .*/data/train"):
        prepare(fresh_root, tmp_path / "prepared", password=mind2web_spec.password)
    assert not list(fresh_root.rglob("test_*")) and not (tmp_path / "prepared").exists()


def test_the_main_job_prepares_the_root_layout_instead_of_generating(fresh_root, tmp_path,
                                                                     monkeypatch,
                                                                     mind2web_generated,
                                                                     mind2web_spec):
    shutil.move(fresh_root / "data" / "train", fresh_root / "train")
    shutil.rmtree(fresh_root / "data")
    monkeypatch.setenv(PASSWORD_ENV, mind2web_spec.password)
    cfg = parse_config({"environment": "mind2web", "mind2web": {
        "data_root": str(fresh_root), "prepared_dir": str(tmp_path / "prepared")}})
    service.prepare_data(cfg)
    assert not (fresh_root / "data").exists()
    train = read_rows(tmp_path / "prepared" / "train.jsonl")
    assert len(train) == mind2web_generated.counts["train"]


def _refused_by_prepare_data_sh(root: Path, tmp_path: Path, password: str) -> str:
    """scripts/web/prepare_data.sh over `root` in a sandbox: it must exit 2 without a
    traceback and with one error line, its last; that line."""
    box = DataSandbox(tmp_path / "box", "web", ROOT / "configs" / "web.yaml")
    env = {k: v for k, v in os.environ.items() if k not in DATA_VARIABLES}
    env.update(VENV=str(Path(sys.executable).parent.parent), **{PASSWORD_ENV: password})
    done = subprocess.run(["bash", "scripts/web/prepare_data.sh", "--data-root", str(root)],
                          cwd=box.root, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert errors == [done.stderr.splitlines()[-1]], done.stderr
    return errors[0]


def test_duplicate_ids_stop_prepare_data_sh_with_one_line_naming_both_files(fresh_root, tmp_path,
                                                                            mind2web_spec):
    train = sorted((fresh_root / "data" / "train").glob("*.json"))[0]
    shutil.copy(train, fresh_root / "data" / "train" / f"zz_copy_{train.name}")
    error = _refused_by_prepare_data_sh(fresh_root, tmp_path, mind2web_spec.password)
    assert f"data/train/{train.name} (task 0)" in error, error
    assert f"data/train/zz_copy_{train.name} (task 0)" in error, error


def test_a_truncated_task_file_stops_prepare_data_sh_with_one_line_naming_file_and_line(
        fresh_root, tmp_path, mind2web_spec):
    train = sorted((fresh_root / "data" / "train").glob("*.json"))[0]
    text = json.dumps(json.loads(train.read_text()), indent=1)  # many lines, as published
    cut = text[:len(text) // 2]
    train.write_text(cut)
    error = _refused_by_prepare_data_sh(fresh_root, tmp_path, mind2web_spec.password)
    line = cut.count("\n") + 1
    assert f"{train}:{line}: invalid JSON" in error and "truncated" in error, error


def test_split_folders_both_at_the_root_and_in_data_are_refused(fresh_root, tmp_path,
                                                                 mind2web_spec):
    shutil.copytree(fresh_root / "data" / "train", fresh_root / "train")
    with pytest.raises(TwoLayoutsError, match=r"both at .*root \(train\) and in .*root/data "
                                              r"\(train\): keep one layout"):
        prepare(fresh_root, tmp_path / "prepared", password=mind2web_spec.password)
    assert not (tmp_path / "prepared").exists() and not list(fresh_root.rglob("test_*"))


def test_test_splits_extracted_earlier_are_used_with_a_warning_when_no_zip_is_left(
        fresh_root, tmp_path, mind2web_spec, mind2web_generated, caplog):
    prepare(fresh_root, tmp_path / "first", password=mind2web_spec.password)
    (fresh_root / "test.zip").unlink()
    with caplog.at_level(logging.WARNING, logger="env.mind2web.testzip"):
        manifest = prepare(fresh_root, tmp_path / "second")
    assert {s: manifest["splits"][s]["tasks"] for s in SPLITS} == mind2web_generated.counts
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("no test zip found: using ") and "extracted earlier" in warning
    assert all(str(fresh_root / "data" / split) in warning for split in SPLITS[1:])


def test_an_id_the_server_would_refuse_stops_prepare_data_sh_naming_the_task(fresh_root,
                                                                             tmp_path,
                                                                             mind2web_spec):
    train = sorted((fresh_root / "data" / "train").glob("*.json"))[0]
    tasks = json.loads(train.read_text())
    tasks[1]["annotation_id"] = "x" * (MAX_ID_CHARS + 44)  # 300 characters
    train.write_text(json.dumps(tasks))
    error = _refused_by_prepare_data_sh(fresh_root, tmp_path, mind2web_spec.password)
    assert f"data/train/{train.name} (task 1)" in error and "300 characters" in error, error
    tasks[1]["annotation_id"] = "y" * MAX_ID_CHARS  # at the limit: the server takes it
    train.write_text(json.dumps(tasks))
    prepare(fresh_root, tmp_path / "prepared", mind2web_spec.password)


def test_splits_prepared_before_the_id_limit_was_checked_are_prepared_again(fresh_root,
                                                                              tmp_path,
                                                                              mind2web_spec):
    prepared = tmp_path / "prepared"
    prepare(fresh_root, prepared, password=mind2web_spec.password)
    first = outputs(prepared)
    manifest = json.loads((prepared / "manifest.json").read_text())
    del manifest["max_id_chars"]  # as an earlier version wrote it
    (prepared / "manifest.json").write_text(json.dumps(manifest))
    prepare(fresh_root, prepared)
    assert outputs(prepared)["train.jsonl"] != first["train.jsonl"]
    assert json.loads((prepared / "manifest.json").read_text())["max_id_chars"] == MAX_ID_CHARS
