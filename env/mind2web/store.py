"""The env server's task store: Mind2Web task files under the data root, indexed once on disk.

Owns finding and loading tasks. At start every task file of the split folders under the data root
(`<root>/data/<split>/*.json` or `<root>/<split>/*.json`, as `env.mind2web.prepare` reads them;
no other JSON file under the root) is streamed once with ijson (never loaded whole) into a
compact JSON-lines copy with byte offsets in the server's own cache folder
(`mind2web.server_cache_dir`), reused while the source's size and mtime are unchanged. A task
file that does not parse (truncated, say) or is no task list, and an annotation id found twice
(in two files, or twice in one), raise `TaskDataError` naming the file and line, or both places,
so a stray copy is never served in place of the original.
Symbolic links are not followed (a linked folder or file under the root is logged and not
served, wherever it points: `env.mind2web.prepare` refuses them alike), and `check_prepared`
stops a server whose tasks do not cover, unchanged, the files the prepared splits came from (or
whose prepared `manifest.json` does not parse: named with its line). Unchanged is
`env.mind2web.prepare.unchanged`'s: the same size, and the same mtime or content, wherever the
root was when the splits were prepared (a data folder copied to a GPU node is served).
A task is named by annotation id, or by (file relative to the root, index): a file
outside the root (`../`, absolute, symlinked out) gets one fixed message decided before anything
is looked up, and only indexed files are ever opened, so an answer never reveals what exists
outside the root. Parsed tasks and page snapshots sit in bounded LRU caches; a page missing from
its cache is built by the `build` function given (`build_snapshot` in this thread by default, or
`env.mind2web.snapshot_pool`'s processes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson
from tqdm import tqdm

from env.json_files import JSONFileError, read_json, stream_json
from env.mind2web.prepare import SPLITS, split_home, unchanged
from env.mind2web.snapshot import Snapshot, build_snapshot, clean
from env.mind2web.validate import GoldStep
from env.wire import WireError
from evolving_rl.retrieval.prepared import FILES_KEY, manifest_mismatch

logger = logging.getLogger(__name__)

OUTSIDE = "task.file must name a task file inside the data root, relative to it"


class TaskDataError(ValueError):
    """The tasks under the data root cannot be served as they are (the server must not start)."""


@dataclass(frozen=True)
class Step:
    cleaned_html: str
    gold: GoldStep


@dataclass(frozen=True)
class Task:
    annotation_id: str
    confirmed_task: str
    website: str
    domain: str
    subdomain: str
    action_reprs: tuple[str, ...]
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class TaskKey:
    file: str  # relative to the data root
    index: int


def _compact(task: dict[str, Any]) -> dict[str, Any]:
    """The fields the server needs of one official task record."""
    actions = []
    for action in task.get("actions") or []:
        operation = action.get("operation") or {}
        actions.append({
            "cleaned_html": str(action.get("cleaned_html") or ""),
            "op": str(operation.get("op") or ""), "value": str(operation.get("value") or ""),
            "pos": [str(c["backend_node_id"]) for c in action.get("pos_candidates") or []
                    if c.get("backend_node_id")]})
    return {key: str(task.get(key) or "") for key in
            ("annotation_id", "confirmed_task", "website", "domain", "subdomain")} | {
        "action_reprs": [str(r) for r in task.get("action_reprs") or []], "actions": actions}


def _task(data: dict[str, Any]) -> Task:
    reprs = tuple(data["action_reprs"])
    steps = tuple(Step(a["cleaned_html"], GoldStep(a["op"], clean(a["value"]),
                                                     frozenset(a["pos"]),
                                                     reprs[i] if i < len(reprs) else ""))
                  for i, a in enumerate(data["actions"]))
    return Task(data["annotation_id"], clean(data["confirmed_task"]), data["website"],
                data["domain"], data["subdomain"], reprs, steps)


class LRU:
    """A small thread-safe LRU cache of `load(key)`."""

    def __init__(self, size: int, load: Callable[[Any], Any]) -> None:
        self._size, self._load = size, load
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Any) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = self._load(key)
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


@dataclass(frozen=True)
class _Indexed:
    lines: Path
    offsets: tuple[tuple[int, int], ...]


def _index_file(source: Path, rel: str, cache_dir: Path) -> tuple[_Indexed, list[str]]:
    """The compact copy of one task file (built unless a valid one exists) and its ids."""
    stem = hashlib.sha1(rel.encode()).hexdigest()[:16]
    lines, meta = cache_dir / f"{stem}.jsonl", cache_dir / f"{stem}.offsets"
    stat = source.stat()
    signature = {"file": rel, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        saved = json.loads(meta.read_text(encoding="utf-8"))
        if saved["signature"] == signature and lines.is_file():
            return _Indexed(lines, tuple(map(tuple, saved["offsets"]))), saved["ids"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    offsets, ids, position = [], [], 0
    partial = lines.with_suffix(f".{os.getpid()}.tmp")
    try:
        with partial.open("wb") as out:
            for task in stream_json(source, lambda fh: ijson.items(fh, "item", use_float=True)):
                row = (json.dumps(_compact(task), ensure_ascii=False) + "\n").encode()
                out.write(row)
                offsets.append((position, position + len(row)))
                ids.append(str(task.get("annotation_id") or ""))
                position += len(row)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(lines)  # then the index: a reader never pairs an index with other lines
    partial.write_text(json.dumps({"signature": signature, "offsets": offsets, "ids": ids}),
                       encoding="utf-8")
    partial.replace(meta)
    return _Indexed(lines, tuple(offsets)), ids


def _task_files(root: Path) -> list[Path]:
    """The task files of the split folders (`<root>/data/<split>/*.json`, or
    `<root>/<split>/*.json`: `env.mind2web.prepare.split_home`), in path order, reached without
    following a symbolic link (a linked folder or file is logged and left out, wherever it
    points). Other JSON files under the root (a manifest, notes) are no task files."""
    home = split_home(root)
    found = []
    for folder in [home / split for split in SPLITS]:
        if folder.is_symlink() or (home != root and home.is_symlink()):
            logger.warning("not following the symbolic link %s", folder)
            continue
        for path in folder.glob("*.json"):
            if path.is_symlink():
                logger.warning("not following the symbolic link %s", path)
            elif path.is_file():
                found.append(path)
    return sorted(found)


def check_prepared(store: TaskStore, prepared_dir: str | Path) -> None:
    """`TaskDataError` unless `store` serves every task file the prepared splits were written
    from (`<prepared_dir>/manifest.json`), unchanged, and the split files are those the manifest
    describes (line count and sha256): prepared rows the server cannot reset, or a split that
    lost lines, stop it at start, not at reset. No manifest: nothing is checked (logged)."""
    manifest_path = Path(prepared_dir) / "manifest.json"
    if not manifest_path.is_file():
        logger.warning("no %s: the prepared splits are not checked against the tasks",
                       manifest_path)
        return
    try:
        manifest = read_json(manifest_path)
    except JSONFileError as err:
        raise TaskDataError(f"{err}: run scripts/web/prepare_data.sh again") from None
    inputs = manifest.get("inputs") if isinstance(manifest, dict) else None
    if not isinstance(inputs, list) or not all(
            isinstance(entry, list) and len(entry) in (3, 4) for entry in inputs):
        raise TaskDataError(f"{manifest_path} has no list of inputs: run "
                            "scripts/web/prepare_data.sh again")
    if Path(manifest.get("data_root", "")) != store.root:
        logger.info("%s was prepared from %s; the server serves %s: checking each task file by "
                    "size and content", prepared_dir, manifest.get("data_root"), store.root)
    for name in manifest.get(FILES_KEY, {}):
        path = Path(prepared_dir) / f"{name}.jsonl"
        mismatch = (manifest_mismatch(path, path.read_bytes()) if path.is_file()
                    else f"{path} is missing")
        if mismatch:
            raise TaskDataError(mismatch)
    for entry in inputs:
        rel = entry[0]
        if not store.serves(rel):
            raise TaskDataError(f"{rel} (prepared in {prepared_dir}) is not served from "
                                f"{store.root}: it is missing or reached through a link")
        if not unchanged(store.root / rel, entry):
            raise TaskDataError(f"{rel} changed since {prepared_dir} was prepared: run "
                                "scripts/web/prepare_data.sh again")


class TaskStore:
    """Every task under `root`, by annotation id or (file, index)."""

    def __init__(self, root: str | Path, cache_dir: str | Path, task_cache_size: int,
                 snapshot_cache_size: int,
                 build: Callable[[str], Snapshot] = build_snapshot) -> None:
        self.root = Path(root).resolve()
        self._build = build
        cache = Path(cache_dir)
        cache.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, _Indexed] = {}
        self._by_id: dict[str, TaskKey] = {}
        for source in tqdm(_task_files(self.root), desc="indexing Mind2Web tasks", disable=None):
            rel = source.relative_to(self.root).as_posix()
            try:
                indexed, ids = _index_file(source, rel, cache)
            except JSONFileError as err:
                raise TaskDataError(str(err)) from None
            except (AttributeError, TypeError) as err:
                raise TaskDataError(f"{source}: not a Mind2Web task list ({err})") from None
            self._files[rel] = indexed
            self._add_ids(rel, ids)
        self._tasks = LRU(task_cache_size, self._read)
        self._snapshots = LRU(snapshot_cache_size, self._render)
        logger.info("%d tasks in %d files under %s", len(self), len(self._files), self.root)

    def _add_ids(self, rel: str, ids: list[str]) -> None:
        """Index `rel`'s tasks by id; an id already indexed from another file is an error."""
        for index, annotation_id in enumerate(ids):
            if not annotation_id:
                continue
            first = self._by_id.setdefault(annotation_id, TaskKey(rel, index))
            if first.file != rel or first.index != index:
                raise TaskDataError(
                    f"task {annotation_id} is in both {first.file} and {rel} (under "
                    f"{self.root}): remove the copy that should not be served")

    def __len__(self) -> int:
        return sum(len(f.offsets) for f in self._files.values())

    def serves(self, rel: str) -> bool:
        """Whether the task file `rel` (relative to the root) is indexed."""
        return rel in self._files

    def locate_id(self, annotation_id: str) -> TaskKey:
        key = self._by_id.get(annotation_id)
        if key is None:
            raise WireError(404, "unknown_task", "no task with this annotation id", "task")
        return key

    def locate_file(self, name: str, index: int) -> TaskKey:
        """(file, index) checked against the root and the index (raises `WireError`)."""
        if "\x00" in name or Path(name).is_absolute():
            raise WireError(400, "bad_task_file", OUTSIDE, "task.file")
        resolved = (self.root / name).resolve()
        if not resolved.is_relative_to(self.root):
            raise WireError(400, "bad_task_file", OUTSIDE, "task.file")
        rel = resolved.relative_to(self.root).as_posix()
        if rel not in self._files:
            raise WireError(404, "unknown_task", "no task file of that name", "task.file")
        if not 0 <= index < len(self._files[rel].offsets):
            raise WireError(404, "unknown_task", f"{rel} has "
                            f"{len(self._files[rel].offsets)} tasks", "task.index")
        return TaskKey(rel, index)

    def task(self, key: TaskKey) -> Task:
        return self._tasks.get(key)

    def snapshot(self, key: TaskKey, step: int) -> Snapshot:
        return self._snapshots.get((key, step))

    def _read(self, key: TaskKey) -> Task:
        indexed = self._files[key.file]
        start, end = indexed.offsets[key.index]
        with indexed.lines.open("rb") as fh:
            fh.seek(start)
            return _task(json.loads(fh.read(end - start)))

    def _render(self, key_step: tuple[TaskKey, int]) -> Snapshot:
        key, step = key_step
        return self._build(self.task(key).steps[step].cleaned_html)
