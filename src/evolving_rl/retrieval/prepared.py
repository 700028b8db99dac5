"""The prepared-dataset contract, read in one place: `<prepared_dir>/<split>.jsonl` rows.

Owns where an environment's prepared splits live (`environment_prepared_dir`: the `prepared_dir`
of the config section named after the environment, which every environment's section has;
`prepared_dir_for`, what retrieval and the task catalog read: `retrieval.prepared_dir` when set,
else that one), what one line holds (`PreparedRow`: `id`, `question`, `prompt`,
`metadata` with `task_type`; the shape every environment's data preparation writes) and how the
files are read, each line validated, errors naming file and line (`read_prepared`, `read_split`,
`read_prepared_dir`), each file first checked against the line count and sha256 its folder's
`manifest.json` records (`manifest_mismatch`; the preparations write them with `file_entry`):
a split that lost whole lines is refused with one line, never used as it is. `PreparedData` is
what one evaluation reads, each file parsed once and passed down: the splits of the retrieval
index and the task catalog, and the environment's own (one dict when they are one folder). The
pipeline takes rows as the JSON objects they are
(`PreparedRow.as_dict`; `split_rows`: a split of the configured environment so); `round_robin`
picks a split's first rows over task types (the local job's and the checkpoint evaluation's
held-out subsets).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolving_rl.config.schema import Config


class PreparedDataError(ValueError):
    """A prepared split file is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class PreparedRow:
    """One task of a prepared split file; `prompt` is the question when the line has none."""

    id: str
    question: str
    prompt: str
    metadata: Mapping[str, Any]

    @property
    def task_type(self) -> str:
        return self.metadata.get("task_type", "")

    def as_dict(self) -> dict[str, Any]:
        """The row as the JSON object the pipeline and the adapters read."""
        return {"id": self.id, "question": self.question, "prompt": self.prompt,
                "metadata": dict(self.metadata)}


def environment_prepared_dir(cfg: Config) -> Path:
    """Where the configured environment's data preparation writes its split files."""
    return Path(getattr(cfg, cfg.environment).prepared_dir)


def prepared_dir_for(cfg: Config) -> Path:
    """The split files of the retrieval index and the task catalog: `retrieval.prepared_dir`, or
    the environment's."""
    if cfg.retrieval.prepared_dir:
        return Path(cfg.retrieval.prepared_dir)
    return environment_prepared_dir(cfg)


def parse_row(line: str, where: str) -> PreparedRow:
    """One JSONL line as a row, or `PreparedDataError` naming `where` (file:line)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise PreparedDataError(f"{where}: invalid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise PreparedDataError(f"{where}: expected a JSON object")
    task_id, question = record.get("id"), record.get("question")
    prompt, metadata = record.get("prompt", question), record.get("metadata") or {}
    if not isinstance(task_id, str) or not task_id:
        raise PreparedDataError(f"{where}: 'id' must be a non-empty string")
    if not isinstance(question, str) or not question.strip():
        raise PreparedDataError(f"{where}: 'question' must be a non-empty string")
    if not isinstance(prompt, str):
        raise PreparedDataError(f"{where}: 'prompt' must be a string")
    if not isinstance(metadata, dict):
        raise PreparedDataError(f"{where}: 'metadata' must be an object")
    if not isinstance(metadata.get("task_type", ""), str):
        raise PreparedDataError(f"{where}: 'metadata.task_type' must be a string")
    return PreparedRow(task_id, question, prompt, metadata)


MANIFEST = "manifest.json"
FILES_KEY = "files"  # manifest key: split name -> `file_entry` of its JSONL file


def file_entry(data: bytes) -> dict[str, Any]:
    """What a manifest records of a split file's bytes: its line count and sha256."""
    return {"lines": data.count(b"\n"), "sha256": hashlib.sha256(data).hexdigest()}


def manifest_mismatch(path: Path, data: bytes) -> str | None:
    """Why the split file `path` (its bytes `data`) is not the one its folder's manifest
    describes (`files.<split>`: line count and digest), or None. A folder without a manifest,
    or a manifest that does not list the file (written before digests were), checks nothing."""
    manifest = path.parent / MANIFEST
    if not manifest.is_file():
        return None
    try:
        entry = json.loads(manifest.read_text(encoding="utf-8")).get(FILES_KEY, {})[path.stem]
    except KeyError:
        return None
    except (ValueError, AttributeError, TypeError):
        return f"{manifest} does not parse: prepare the data again"
    found = file_entry(data)
    if found["lines"] != entry.get("lines"):
        return (f"{path} holds {found['lines']} lines but {manifest} says "
                f"{entry.get('lines')}: the file lost or gained lines since it was prepared; "
                "prepare the data again")
    if found["sha256"] != entry.get("sha256"):
        return (f"{path} is not the file {manifest} describes (its sha256 differs): it "
                "changed since it was prepared; prepare the data again")
    return None


def read_prepared(path: str | Path) -> list[PreparedRow]:
    """Every row of one JSONL file, in file order (blank lines skipped), once the file matches
    its manifest (`manifest_mismatch`)."""
    path = Path(path)
    if not path.is_file():
        raise PreparedDataError(f"prepared file not found: {path}")
    data = path.read_bytes()
    mismatch = manifest_mismatch(path, data)
    if mismatch:
        raise PreparedDataError(mismatch)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PreparedDataError(f"{path}: not UTF-8 ({err.reason})") from None
    return [parse_row(line, f"{path}:{lineno}")
            for lineno, line in enumerate(text.split("\n"), start=1) if line.strip()]


def split_names(prepared_dir: str | Path) -> list[str]:
    """Names of the split files present in `prepared_dir`, sorted."""
    return sorted(p.stem for p in Path(prepared_dir).glob("*.jsonl"))


def read_split(prepared_dir: str | Path, split: str) -> list[PreparedRow]:
    """The rows of `<prepared_dir>/<split>.jsonl`."""
    return read_prepared(Path(prepared_dir) / f"{split}.jsonl")


def split_rows(cfg: Config, split: str) -> list[dict[str, Any]]:
    """The rows of one prepared split of the configured environment, as the pipeline takes
    them."""
    return [row.as_dict() for row in read_split(environment_prepared_dir(cfg), split)]


def read_prepared_dir(prepared_dir: str | Path,
                      splits: list[str] | None = None) -> dict[str, list[PreparedRow]]:
    """Split name -> rows for `splits` (every split file present when None), in that order."""
    names = list(splits) if splits else split_names(prepared_dir)
    if not names:
        raise PreparedDataError(f"no prepared <split>.jsonl files in {prepared_dir}")
    return {name: read_split(prepared_dir, name) for name in names}


@dataclass(frozen=True)
class PreparedData:
    """Split name -> rows of the folder `prepared_dir_for` names (`indexed`: the retrieval index,
    the task catalog) and of the environment's (`environment`: the same dict when it is the
    same folder), each file parsed once."""

    indexed: dict[str, list[PreparedRow]]
    environment: dict[str, list[PreparedRow]]

    @classmethod
    def read(cls, cfg: Config) -> PreparedData:
        indexed = read_prepared_dir(prepared_dir_for(cfg))
        if prepared_dir_for(cfg).resolve() == environment_prepared_dir(cfg).resolve():
            return cls(indexed, indexed)
        return cls(indexed, read_prepared_dir(environment_prepared_dir(cfg)))

    def split(self, name: str) -> list[PreparedRow]:
        """The rows of the environment's split `name`."""
        if name not in self.environment:
            raise PreparedDataError(f"no prepared split {name!r} (the environment's splits: "
                                    f"{', '.join(self.environment)})")
        return self.environment[name]


def round_robin(rows: list[PreparedRow], limit: int | None) -> list[dict[str, Any]]:
    """The first `limit` rows (all when None) taken round-robin over sorted task types, as the
    pipeline takes them (deterministic)."""
    if limit is None:
        return [row.as_dict() for row in rows]
    by_type: dict[str, list[PreparedRow]] = {}
    for row in rows:
        by_type.setdefault(row.task_type, []).append(row)
    queues = [list(queue) for _, queue in sorted(by_type.items())]
    picked: list[dict[str, Any]] = []
    while len(picked) < limit and any(queues):
        for queue in queues:
            if queue and len(picked) < limit:
                picked.append(queue.pop(0).as_dict())
    return picked
