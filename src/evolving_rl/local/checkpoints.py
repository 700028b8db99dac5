"""Checkpoint folders that survive an interrupt: staged writes and a completeness check.

Owns two rules (docs/reference.md, "What a run guarantees"):

- `write_folder` writes a checkpoint into a staging folder beside the final one
  (`.<name>.partial-<pid>`), flushes every file to disk, then renames it into place: a kill at
  any moment leaves either the previous complete folder or the new complete one, never a
  half-written file under the final name. A folder that already exists is swapped out only after
  the new one is complete (moved aside, the new one renamed in, the old one deleted).
- `incomplete_reason` tells whether a folder holds a complete HF model: a `config.json` that
  parses as a JSON object, and weights whose files are whole (every safetensors file as long as
  its header says, the shards an index names all present; a `pytorch_model.bin` a whole zip);
  with `trainer_state`, also a whole `trainer_state.pt` (a zip, as `torch.save` writes). The
  evaluation, the main job's `local.resume_from` and the eval scripts (`main`, run on an `--hf`
  folder) refuse such a folder before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from evolving_rl.local.metrics import RunWriteError

STATE_FILE = "trainer_state.pt"
INDEX_FILE = "model.safetensors.index.json"


def _sync_tree(folder: Path) -> None:
    """fsync every file under `folder`, then the folder itself."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_folder(directory: Path, write: Callable[[Path], None]) -> Path:
    """Call `write(staging)` on a fresh staging folder beside `directory`, then move it into
    place as `directory` (module docstring); a failed write removes the staging folder and
    leaves `directory` as it was (a full disk or a file-size limit: `RunWriteError`)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = directory.with_name(f".{directory.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        write(staging)
        _sync_tree(staging)
    except (OSError, RuntimeError) as error:  # torch's zip writer raises RuntimeError
        shutil.rmtree(staging, ignore_errors=True)
        raise RunWriteError(directory, error) from error
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
    if directory.exists():
        directory.rename(old)
    staging.rename(directory)
    shutil.rmtree(old, ignore_errors=True)
    return directory


def _safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file `path` is not whole (shorter than its header says), or None."""
    size = path.stat().st_size
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length)) if length <= size else None
    except (struct.error, ValueError, UnicodeDecodeError):
        return f"{path.name} has no readable header ({size} bytes)"
    if not isinstance(header, dict):
        return f"{path.name} is cut short ({size} bytes)"
    end = max((int(t["data_offsets"][1]) for name, t in header.items()
               if name != "__metadata__" and isinstance(t, dict) and "data_offsets" in t),
              default=0)
    if size < 8 + length + end:
        return f"{path.name} is cut short ({size} of {8 + length + end} bytes)"
    return None


def _weight_files(folder: Path) -> list[Path] | str:
    """The weight files `folder` should hold, or why there are none to check."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                                .values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            return f"{INDEX_FILE} does not parse"
        return [folder / shard for shard in shards]
    found = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    return found or "no weights (*.safetensors or pytorch_model.bin)"


def _file_problem(path: Path) -> str | None:
    if not path.is_file():
        return f"{path.name} is missing"
    if path.suffix == ".safetensors":
        return _safetensors_problem(path)
    if not zipfile.is_zipfile(path):
        return f"{path.name} is cut short ({path.stat().st_size} bytes)"
    return None


def incomplete_reason(folder: Path, trainer_state: bool = False) -> str | None:
    """Why `folder` is not a complete checkpoint (module docstring), or None when it is."""
    config = folder / "config.json"
    if not config.is_file():
        return "no config.json"
    try:
        if not isinstance(json.loads(config.read_text(encoding="utf-8")), dict):
            return "config.json is not a JSON object"
    except (ValueError, UnicodeDecodeError):
        return f"config.json does not parse ({config.stat().st_size} bytes)"
    files = _weight_files(folder)
    if isinstance(files, str):
        return files
    if trainer_state:
        files.append(folder / STATE_FILE)
    for path in files:
        problem = _file_problem(path)
        if problem:
            return problem
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m evolving_rl.local.checkpoints DIR`: exit 0 when DIR is a complete checkpoint,
    else exit 2 with one line naming it and what is wrong (the eval scripts' check before they
    start a server on it)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m evolving_rl.local.checkpoints DIR\n")
        return 2
    problem = incomplete_reason(Path(args[0]))
    if problem:
        sys.stderr.write(f"{args[0]} is no complete checkpoint: {problem}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
