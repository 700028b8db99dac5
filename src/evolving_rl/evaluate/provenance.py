"""What an evaluation's cases are computed from, as digests: the key its finished cases are kept
under, so that a rerun reuses only cases of the same policy, settings, data and code.

Owns `EvalKey` (five digests and `key`, the digest of the five) and `eval_key`:
  policy    `--local`: every file of the checkpoint folder (relative name, size and content; a
            7B folder takes seconds) and of `--tokenizer` when given, with the device and dtype;
            a URL source: kind, URL, model name and the tokenizer folder's files. A served model
            cannot be digested beyond that: a server restarted at the same address with other
            weights reads as the same policy.
  config    `config.to_dict` without the run-local settings (`RUN_LOCAL`: hosts, ports, thread
            and worker counts, and every `*_dir` / `*_path` location: what the data folders hold
            is digested under `data`).
  protocol  the retrieval and training splits, and the library file's content when one is given.
  data      the prepared split files read: the evaluated splits, the training split and the
            retrieval split (`retrieval.prepared_dir` when set); and the files the evaluated
            splits' rows point to (`referenced_files`: every row of those splits, whatever the
            task limit, so a rerun with more tasks still reuses the cases run): ALFWorld, every
            file of the trial folder `metadata.game` names under `alfworld.data_root` (the
            game, its traj_data.json); Mind2Web, the task file `metadata.source_file` names
            under `mind2web.data_root` (`REFERENCES`; the official test files are large and
            are read whole, each run); the probe, none (its tasks come from the seed).
  code      the content of the code that builds prompts, parses replies, runs protocols and
            plays the games (`code_digest`): every `*.py` and `*.json` file (the hand-written
            skill cards, domains/data/alfworld_written_skills.json, among them) of the
            `evolving_rl` and `env` packages, outside `__pycache__` and hidden files. A content
            hash, not the git commit: it needs no git, sees uncommitted edits, and the same
            tree gives the same digest in any clone. It errs on the safe side: any edit of the
            packages, even one no episode reads, starts the cases over. Installed libraries
            (torch, transformers, SGLang) are not digested.
Repeats, the task limit and the protocols are left out: a case is named by protocol, split, task
and repeat, so a rerun with more repeats or tasks reuses the cases already run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import env
import evolving_rl
from evolving_rl.config import to_dict
from evolving_rl.config.schema import Config
from evolving_rl.domains.alfworld_expert import game_file
from evolving_rl.evaluate.policies import PolicySpec
from evolving_rl.retrieval.prepared import (
    PreparedRow,
    environment_prepared_dir,
    prepared_dir_for,
)

RUN_LOCAL = re.compile(r"^(host|port|threads|n_workers)$|_(port|threads|workers|dir|path)$"
                       r"|^threads_")
_CHUNK = 1 << 20
_SHOWN = 16  # hex digits of a digest
SOURCE_ROOTS = (Path(evolving_rl.__file__).parent, Path(env.__file__).parent)
SOURCE_SUFFIXES = (".py", ".json")


@dataclass(frozen=True)
class EvalKey:
    """The digests of what the cases are computed from (module docstring)."""

    policy: str
    config: str
    protocol: str
    data: str
    code: str

    @property
    def key(self) -> str:
        return _digest_of([self.policy, self.config, self.protocol, self.data, self.code])

    def as_meta(self) -> dict[str, str]:
        return {"cases_key": self.key, "policy_digest": self.policy,
                "config_digest": self.config, "protocol_digest": self.protocol,
                "data_digest": self.data, "code_digest": self.code}


def _digest_of(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_SHOWN]


def files_digest(paths: Iterable[Path], root: Path | None = None) -> str:
    """Digest of the files' names (relative to `root` when given, else the file name alone: a
    folder's location is no part of it), sizes and contents; a missing file counts by name."""
    return named_files_digest(
        (str(path.relative_to(root)) if root is not None else path.name, path) for path in paths)


def named_files_digest(files: Iterable[tuple[str, Path]]) -> str:
    """Digest of (name, file) pairs: each name, the file's size and content, in the order
    given; a missing file counts by name."""
    digest = hashlib.sha256()
    for name, path in files:
        size = path.stat().st_size if path.is_file() else -1
        digest.update(f"{name}\0{size}\0".encode())
        if size >= 0:
            with path.open("rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
    return digest.hexdigest()[:_SHOWN]


def folder_digest(folder: Path) -> str:
    """Digest of every file in `folder` and below it."""
    return files_digest(sorted(p for p in folder.rglob("*") if p.is_file()), root=folder)


def policy_digest(spec: PolicySpec) -> str:
    tokenizer = folder_digest(Path(spec.tokenizer)) if spec.tokenizer else None
    if spec.kind == "local":
        return _digest_of(["local", folder_digest(Path(str(spec.path))), tokenizer,
                           spec.device, spec.dtype])
    return _digest_of([spec.kind, spec.url, spec.model, tokenizer])


def outcome_settings(cfg: Config) -> dict[str, Any]:
    """The config as a dict without its run-local settings (`RUN_LOCAL`)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not RUN_LOCAL.search(k)}
        return value
    return strip(to_dict(cfg))


def data_files(cfg: Config, splits: Iterable[str], retrieval_split: str) -> list[Path]:
    prepared = environment_prepared_dir(cfg)
    files = [prepared / f"{split}.jsonl" for split in sorted(set(splits))]
    return [*files, prepared_dir_for(cfg) / f"{retrieval_split}.jsonl"]


def code_files(roots: Iterable[Path] | None = None) -> list[tuple[str, Path]]:
    """(name from the package folder on, file) of every source file `code_digest` reads, in
    `roots` (default `SOURCE_ROOTS`)."""
    found = []
    for root in SOURCE_ROOTS if roots is None else roots:
        for path in sorted(root.rglob("*")):
            parts = path.relative_to(root).parts
            if (path.suffix in SOURCE_SUFFIXES and path.is_file() and "__pycache__" not in parts
                    and not any(part.startswith(".") for part in parts)):
                found.append((Path(root.name, *parts).as_posix(), path))
    return found


def code_digest() -> str:
    """Digest of the packages' source files (module docstring)."""
    return named_files_digest(code_files())


def _trial_files(root: Path, game: str) -> list[Path]:
    """Every file of the ALFWorld trial folder holding the game `game` names; the folder
    itself when it is missing."""
    folder = game_file(root, game).parent
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else [folder]


def _task_file(root: Path, source: str) -> list[Path]:
    return [root / source]


# environment -> (the row's metadata field naming a path under its `data_root`, the files that
# path stands for); None: its rows point to no file (the probe's tasks are a function of the
# seed and task id, both already in the key: the config and the prepared rows)
REFERENCES: dict[str, tuple[str, Callable[[Path, str], list[Path]]] | None] = {
    "alfworld": ("game", _trial_files), "mind2web": ("source_file", _task_file), "probe": None}


def referenced_files(cfg: Config, rows: Iterable[PreparedRow]) -> list[tuple[str, Path]]:
    """(name under the data root, file) of every file the `rows` point to (`REFERENCES`),
    sorted; a file named but missing counts by name, one outside the root is not read."""
    if cfg.environment not in REFERENCES:
        raise ValueError(f"the evaluation cache does not know which files {cfg.environment!r} "
                         "rows point to: add its rule to evaluate.provenance.REFERENCES")
    rule = REFERENCES[cfg.environment]
    if rule is None:
        return []
    field, files_of = rule
    root = Path(getattr(cfg, cfg.environment).data_root)
    inside = root.resolve()
    found: set[Path] = set()
    for row in rows:
        value = row.metadata.get(field)
        # no path, or one outside the data root: the adapter or the env server refuses the row
        if isinstance(value, str) and value and (root / value).resolve().is_relative_to(inside):
            found.update(files_of(root, value))
    return [(os.path.relpath(path, root), path) for path in sorted(found)]


def eval_key(cfg: Config, spec: PolicySpec, rows: Mapping[str, Sequence[PreparedRow]],
             train_split: str, retrieval_split: str, library: Path | None) -> EvalKey:
    """The key of an evaluation of `spec` on the splits of `rows` (split -> every row of it, as
    read for the run: the files are not parsed again) (module docstring)."""
    protocol = _digest_of([retrieval_split, train_split,
                           files_digest([library]) if library is not None else None])
    referenced = referenced_files(cfg, (row for split in rows.values() for row in split))
    data = _digest_of([files_digest(data_files(cfg, [*rows, train_split], retrieval_split)),
                       named_files_digest(referenced)])
    return EvalKey(policy=policy_digest(spec), config=_digest_of(outcome_settings(cfg)),
                   protocol=protocol, data=data, code=code_digest())
