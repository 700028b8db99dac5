"""Prompt datasets from Mind2Web task files — official (osunlp/Mind2Web) or generated alike.

Owns the step from a data root in the official layout (`data/train/*.json` and the test zip, at
the root as published or in `data/`; or the split folders at the root itself, `train/*.json`,
when `data/` holds none: `split_home`; split folders in both places are an error,
`TwoLayoutsError`, since one would be left out without a word) to
`<prepared_dir>/{train,test_task,test_website,test_domain,all}.jsonl`. The test zip is first
extracted next to `train/` (`env.mind2web.testzip`; password from $MIND2WEB_ZIP_PASSWORD).
A required split (all four unless the caller says otherwise) with no task file and no zip
holding it is an error that says where it was looked for, raised before the zip is extracted or
anything else is written. Symbolic links are not followed, here as in
the env server: a split folder or task file that is a link (to a place inside or outside the
root) is an error (`LinkedDataError`).
Every task file is streamed with ijson, one parse event at a time, so memory is bounded by the
largest single value (one page's HTML), never by the file. One row per task:

    {"id": annotation_id, "question": confirmed_task, "prompt": confirmed_task,
     "metadata": {"annotation_id", "website", "domain", "subdomain",
                  "task_type": "domain/subdomain", "source_file": "data/train/train_0.json",
                  "task_index": N, "n_steps": N, "split": "train"}}

An annotation id with no value, or in two task files, is an error naming both
(`DuplicateTaskError`); so is one longer than the env server takes (`MAX_ID_CHARS`: every reset
by it would be refused), naming the task (`TaskIdError`); a task file that does not parse
(truncated, say) is an error naming the file and line (`env.json_files.JSONFileError`); the CLI
prints each of these errors as one line and exits 2.
`all` is the four splits in that order. Writes are atomic (temp + rename); `manifest.json` holds
each input's path under the root, size, mtime and sha256, the id limit they were checked
against and each written file's line count and sha256 (`files`, which every reader checks a split
against); a run whose inputs and limit are unchanged and whose files still match writes nothing
(splits prepared before the limit was checked, or the digests recorded, are prepared again). An
input is unchanged when its size and mtime are, or, where a copy changed the mtime (tar, rsync,
another machine or folder), its content is (`unchanged`): the root's place is not part of what
made the splits.

    MIND2WEB_ZIP_PASSWORD=... python -m env.mind2web.prepare --config configs/web.yaml
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import ijson
from tqdm import tqdm

from env.file_identity import file_sha256, same_file
from env.json_files import JSONFileError, read_json, stream_json
from env.mind2web.testzip import (
    PASSWORD_ENV,
    TEST_SPLITS,
    DuplicateSplitError,
    StaleSplitError,
    ZipPasswordError,
    extract_test_zips,
    find_test_zips,
    zip_splits,
)
from evolving_rl.config import load_config
from evolving_rl.retrieval.prepared import FILES_KEY, file_entry, manifest_mismatch

logger = logging.getLogger(__name__)

SPLITS = ("train", *TEST_SPLITS)
MAX_ID_CHARS = 256  # the longest annotation id the env server takes (`env.mind2web.app`)
DATA_ENV = "MIND2WEB_DATA"
_FIELDS = ("annotation_id", "website", "domain", "subdomain", "confirmed_task")
_FIELD_PREFIXES = {f"item.{name}": name for name in _FIELDS}


class MissingDataError(FileNotFoundError):
    """No Mind2Web task files where they were looked for."""


class EmptySplitError(MissingDataError):
    """A required split has no task."""


class LinkedDataError(ValueError):
    """A split folder or task file is a symbolic link (links are not followed)."""


class DuplicateTaskError(ValueError):
    """An annotation id is missing, or in two task files (or twice in one)."""


class TaskIdError(ValueError):
    """An annotation id the env server would refuse (longer than `MAX_ID_CHARS`)."""


class TwoLayoutsError(ValueError):
    """Split folders both at the root and in `data/`: which tasks to use is not ours to pick."""


@dataclass(frozen=True)
class TaskRow:
    """One prompt row; `to_json` is the JSONL contract."""

    annotation_id: str
    task: str
    website: str
    domain: str
    subdomain: str
    source_file: str
    task_index: int
    n_steps: int
    split: str

    def to_json(self) -> dict:
        return {"id": self.annotation_id, "question": self.task, "prompt": self.task,
                "metadata": {"annotation_id": self.annotation_id, "website": self.website,
                             "domain": self.domain, "subdomain": self.subdomain,
                             "task_type": f"{self.domain}/{self.subdomain}",
                             "source_file": self.source_file, "task_index": self.task_index,
                             "n_steps": self.n_steps, "split": self.split}}


def missing_data_message(data_root: Path) -> str:
    return (f"no Mind2Web task files under {data_root} (expected data/train/*.json, or "
            "train/*.json, and the test zip). Get them either way:\n"
            "  - official data: download the dataset osunlp/Mind2Web from Hugging Face into that "
            "folder (or point mind2web.data_root / $MIND2WEB_DATA at it) and set "
            f"{PASSWORD_ENV} to the test zip's password;\n"
            "  - generated data: run `scripts/web/prepare_data.sh --generate`.")


def empty_split_message(data_root: Path, split: str) -> str:
    where = f"split {split} is empty: no task in {split_home(data_root) / split}/*.json"
    if split == "train":
        return where
    zips = ", ".join(str(p) for p in find_test_zips(data_root)) or "none"
    return (f"{where}. The test splits are extracted from the password-protected test zip, "
            f"looked for at {data_root}/*.zip (where the dataset keeps test.zip) and "
            f"{data_root / 'data'}/*.zip; zips found: {zips}")


def _normalize(text) -> str:
    return re.sub(r"\s+", " ", str(text or "")).strip()


def iter_tasks(path: Path, data_root: Path, split: str) -> Iterator[TaskRow]:
    """The tasks of one JSON list file, streamed event by event (`JSONFileError` naming the
    file and line where it does not parse)."""
    source = path.relative_to(data_root).as_posix()
    fields: dict[str, str] = {}
    index = n_steps = 0
    for prefix, event, value in stream_json(path, ijson.parse):
        if prefix in _FIELD_PREFIXES and event in ("string", "number"):
            fields[_FIELD_PREFIXES[prefix]] = _normalize(value)
        elif prefix == "item.actions.item" and event == "start_map":
            n_steps += 1
        elif prefix == "item" and event == "end_map":
            yield TaskRow(fields.get("annotation_id", ""), fields.get("confirmed_task", ""),
                          fields.get("website", ""), fields.get("domain", ""),
                          fields.get("subdomain", ""), source, index, n_steps, split)
            fields, index, n_steps = {}, index + 1, 0


def split_home(data_root: Path) -> Path:
    """The folder holding the split folders: `<root>/data/` as published, or the root itself
    when only the root holds split folders (`<root>/train/*.json`)."""
    data = data_root / "data"
    at_root = any(os.path.lexists(data_root / split) for split in SPLITS)
    if at_root and not any(os.path.lexists(data / split) for split in SPLITS):
        return data_root
    return data


def refuse_two_layouts(data_root: Path) -> None:
    """`TwoLayoutsError` when both the root and `data/` hold split folders: one of them would be
    left out without a word (and the env server, which serves every file under the root, would
    serve both)."""
    at_root = [split for split in SPLITS if os.path.lexists(data_root / split)]
    in_data = [split for split in SPLITS if os.path.lexists(data_root / "data" / split)]
    if at_root and in_data:
        raise TwoLayoutsError(
            f"split folders both at {data_root} ({', '.join(at_root)}) and in "
            f"{data_root / 'data'} ({', '.join(in_data)}): keep one layout (move or delete the "
            "other)")


def source_files(data_root: Path) -> dict[str, list[Path]]:
    """Task files per split, sorted by name with numeric parts in order."""
    def key(path: Path) -> list:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]
    home = split_home(data_root)
    return {split: sorted((home / split).glob("*.json"), key=key) for split in SPLITS}


def _check_required(data_root: Path, files: dict[str, list[Path]],
                    required: Collection[str]) -> None:
    """Before anything is written: there are task files or a test zip, and every required split
    has task files or is held by a test zip."""
    held = zip_splits(data_root)
    if not any(files.values()) and not held:
        raise MissingDataError(missing_data_message(data_root))
    for split in required:
        if not files[split] and split not in held:
            raise EmptySplitError(empty_split_message(data_root, split))


def refuse_links(data_root: Path, files: dict[str, list[Path]]) -> None:
    """`LinkedDataError` for the first split folder or task file that is a symbolic link: the
    env server does not follow links (`env.mind2web.store`), so rows read through one would name
    tasks it cannot serve."""
    home = split_home(data_root)
    folders = [*([home] if home != data_root else []), *(home / split for split in SPLITS)]
    for path in [*folders, *(p for split in SPLITS for p in files[split])]:
        if path.is_symlink():
            raise LinkedDataError(
                f"{path.relative_to(data_root).as_posix()} (under {data_root}) is a symbolic "
                "link: Mind2Web data is read only from real folders and files under the data "
                "root (links inside or outside it are not followed). Move or copy the data "
                "there, or point the data root at the real folder")


def _fingerprint(data_root: Path, files: dict[str, list[Path]]) -> list:
    """[path under the root, size, mtime_ns, sha256] of every task file, split by split."""
    return [[p.relative_to(data_root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns,
             file_sha256(p)] for split in SPLITS for p in files[split]]


def unchanged(path: Path, entry: list) -> bool:
    """Whether `path` is the task file a manifest's `inputs` entry recorded ([path, size,
    mtime_ns, sha256]; [path, size, mtime_ns] from before the digests), by
    `env.file_identity`'s rule."""
    return same_file(path, entry[1], entry[2], entry[3] if len(entry) > 3 else None)


def _up_to_date(prepared_dir: Path, data_root: Path,
                files: dict[str, list[Path]]) -> dict | None:
    manifest_path = prepared_dir / "manifest.json"
    if not manifest_path.is_file():
        return None
    try:
        manifest = read_json(manifest_path)
    except JSONFileError as err:
        logger.warning("%s; preparing again", err)
        return None
    if (not isinstance(manifest, dict) or manifest.get("max_id_chars") != MAX_ID_CHARS
            or FILES_KEY not in manifest):
        return None  # written before the ids were checked, or the files' digests recorded
    written = [prepared_dir / f"{name}.jsonl" for name in (*SPLITS, "all")]
    intact = all(path.is_file() and manifest_mismatch(path, path.read_bytes()) is None
                 for path in written)  # a split that lost lines is written again
    paths = [p for split in SPLITS for p in files[split]]
    inputs = manifest.get("inputs")
    if not (intact and isinstance(inputs, list) and len(inputs) == len(paths)):
        return None
    same = all(isinstance(entry, list) and len(entry) in (3, 4)
               and entry[0] == path.relative_to(data_root).as_posix() and unchanged(path, entry)
               for entry, path in zip(inputs, paths, strict=True))
    return manifest if same else None


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _write_splits(data_root: Path, prepared_dir: Path, files: dict[str, list[Path]]) -> dict:
    """Stream every split into a temporary JSONL and into `all`; returns counts per split."""
    seen: dict[str, str] = {}
    summary: dict = {}
    with _tmp(prepared_dir / "all.jsonl").open("w", encoding="utf-8") as all_fh:
        for split in SPLITS:
            by_type: Counter = Counter()
            out = prepared_dir / f"{split}.jsonl"
            with _tmp(out).open("w", encoding="utf-8") as fh:
                for path in tqdm(files[split], desc=split, unit="file"):
                    for row in iter_tasks(path, data_root, split):
                        _check_id(row, seen, data_root)
                        line = json.dumps(row.to_json(), ensure_ascii=False) + "\n"
                        fh.write(line)
                        all_fh.write(line)
                        by_type[f"{row.domain}/{row.subdomain}"] += 1
            summary[split] = {"tasks": sum(by_type.values()),
                              "by_task_type": dict(sorted(by_type.items()))}
    return summary


def _check_id(row: TaskRow, seen: dict[str, str], data_root: Path) -> None:
    """`DuplicateTaskError` for a row without an id or with one already `seen` (id -> where);
    `TaskIdError` for an id longer than the env server takes."""
    where = f"{row.source_file} (task {row.task_index})"
    if not row.annotation_id:
        raise DuplicateTaskError(f"{where} under {data_root} has no annotation_id")
    if len(row.annotation_id) > MAX_ID_CHARS:
        raise TaskIdError(
            f"{where} under {data_root} has an annotation_id of {len(row.annotation_id)} "
            f"characters ({row.annotation_id[:40]}...): the env server takes at most "
            f"{MAX_ID_CHARS}, so no reset by it could succeed; shorten it")
    if row.annotation_id in seen:
        raise DuplicateTaskError(
            f"task {row.annotation_id} is in both {seen[row.annotation_id]} and {where} under "
            f"{data_root}: remove the copy that should not be used")
    seen[row.annotation_id] = where


def prepare(data_root: str | Path, prepared_dir: str | Path, password: str | None = None,
            required: Collection[str] = SPLITS) -> dict:
    """Extract the test zip if needed, write the five JSONL splits and `manifest.json`; every
    split of `required` must hold a task (`EmptySplitError` otherwise)."""
    data_root, prepared_dir = Path(data_root).resolve(), Path(prepared_dir)
    if data_root.is_dir():
        refuse_two_layouts(data_root)
        before = source_files(data_root)  # checked before the zip writes anything
        refuse_links(data_root, before)
        _check_required(data_root, before, required)
        extract_test_zips(data_root, password, split_home(data_root))
    files = source_files(data_root)
    refuse_links(data_root, files)
    if not any(files.values()):
        raise MissingDataError(missing_data_message(data_root))
    for split in required:
        if not files[split]:
            raise EmptySplitError(empty_split_message(data_root, split))
    manifest = _up_to_date(prepared_dir, data_root, files)
    if manifest is not None:
        logger.info("%s is up to date", prepared_dir)
        return manifest
    prepared_dir.mkdir(parents=True, exist_ok=True)
    names = (*SPLITS, "all")
    try:
        splits = _write_splits(data_root, prepared_dir, files)
        empty = [split for split in SPLITS if not splits[split]["tasks"]]
        if set(empty) & set(required):
            raise EmptySplitError(empty_split_message(data_root, empty[0]))
        for split in empty:
            logger.warning("split %s is empty (not required)", split)
    except BaseException:
        for name in names:
            _tmp(prepared_dir / f"{name}.jsonl").unlink(missing_ok=True)
        raise
    files_written = {name: file_entry(_tmp(prepared_dir / f"{name}.jsonl").read_bytes())
                     for name in names}
    for name in names:
        os.replace(_tmp(prepared_dir / f"{name}.jsonl"), prepared_dir / f"{name}.jsonl")
    manifest = {"data_root": str(data_root), "inputs": _fingerprint(data_root, files),
                "max_id_chars": MAX_ID_CHARS, "splits": splits, FILES_KEY: files_written}
    _tmp(prepared_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(_tmp(prepared_dir / "manifest.json"), prepared_dir / "manifest.json")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", required=True, help="YAML config (mind2web section)")
    parser.add_argument("--data-root", help=f"data root (default: ${DATA_ENV}, then "
                                            "mind2web.data_root)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    cfg = load_config(args.config).mind2web
    data_root = args.data_root or os.environ.get(DATA_ENV) or cfg.data_root
    try:
        manifest = prepare(data_root, cfg.prepared_dir, os.environ.get(PASSWORD_ENV))
    except (MissingDataError, LinkedDataError, ZipPasswordError, DuplicateSplitError,
            StaleSplitError, DuplicateTaskError, TaskIdError, TwoLayoutsError,
            JSONFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    for name, info in manifest["splits"].items():
        logger.info("%s: %d tasks %s", name, info["tasks"], info["by_task_type"])
    logger.info("wrote %s", cfg.prepared_dir)


if __name__ == "__main__":
    main()
