"""Prompt datasets from ALFWorld game folders — official (`alfworld-download`) or generated alike.

Owns the step from an ALFWORLD_DATA root to `<prepared_dir>/{train,train_seen,train_unseen,
valid_seen,valid_unseen}.jsonl` and the config's `alfworld.subsets`. Games are discovered the way
alfworld's `AlfredTWEnv` does: a folder under `json_2.1.1/<split>/` holding a `traj_data.json` of
one of the six task types and a `game.tw-pddl` marked solvable (folders named `movable`/`Sliced`
are skipped). One row per game:

    {"id": "train/<task folder>/<trial>", "question": <task sentence>, "prompt": <same>,
     "metadata": {"split": "train", "task_type": ..., "game": "json_2.1.1/.../game.tw-pddl",
                  "environment": "alfworld"}}

The task sentence is the one the game states after "Your task is to: " (taken from the game's
grammar). train = every train game; train_seen = the four training types; train_unseen =
look_at_obj_in_light + pick_two_obj_and_place. A subset (`alfworld.subsets`: name, split, games)
is the first `games` rows of its split in the order written (sorted by id), unchanged; a split
holding fewer is an error (`SubsetError`), raised before anything is written. Writes are atomic
and the output depends only on the data, so re-running is idempotent, and a file already holding
what would be written is left untouched (a rerun on unchanged data rewrites nothing);
`manifest.json` holds counts per split and task type, and each file's line count and sha256
(`files`: every reader checks a split against them, `evolving_rl.retrieval.prepared`). A parquet
copy is written next to each JSONL when pandas and pyarrow are installed (JSONL is the
contract).

    python -m env.alfworld.prepare --config configs/local_cpu.yaml
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from evolving_rl.config import load_config
from evolving_rl.config.schema import AlfworldSubset
from evolving_rl.retrieval.prepared import FILES_KEY, file_entry

logger = logging.getLogger(__name__)

DATA_DIR = "json_2.1.1"
SOURCE_SPLITS = ("train", "valid_seen", "valid_unseen")
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SEEN_TYPES = frozenset({"pick_and_place_simple", "pick_clean_then_place_in_recep",
                        "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"})
UNSEEN_TYPES = frozenset({"look_at_obj_in_light", "pick_two_obj_and_place"})
TASK_PREFIX = "Your task is to: "
_TASK_RULE = re.compile(r'"rhs":\s*"Your task is to: ((?:[^"\\]|\\.)*)"')


class MissingDataError(FileNotFoundError):
    """No ALFWorld games where they were looked for."""


class SubsetError(ValueError):
    """A subset asks for more games than its split holds."""


@dataclass(frozen=True)
class GameRow:
    """One prompt row; `to_json` is the JSONL contract."""

    id: str
    question: str
    split: str
    task_type: str
    game: str

    def to_json(self) -> dict:
        return {"id": self.id, "question": self.question, "prompt": self.question,
                "metadata": {"split": self.split, "task_type": self.task_type,
                             "game": self.game, "environment": "alfworld"}}


def missing_data_message(data_root: Path) -> str:
    return (f"no ALFWorld games found under {data_root / DATA_DIR}. Get them either way:\n"
            "  - official data: run `alfworld-download` and set ALFWORLD_DATA (or "
            "alfworld.data_root in the config) to the folder it fills;\n"
            "  - generated games: run `scripts/alfworld/prepare_data.sh --generate` "
            "(writes to alfworld.data_root).")


def task_sentence(grammar: str) -> str | None:
    """The task as the game states it after "Your task is to: "."""
    match = _TASK_RULE.search(grammar)
    return json.loads(f'"{match.group(1)}"') if match else None


def _read_game(folder: Path, data_root: Path, split: str) -> GameRow | None:
    """A row for a game folder AlfredTWEnv would keep, else None."""
    traj = json.loads((folder / "traj_data.json").read_text(encoding="utf-8"))
    task_type = traj.get("task_type")
    game_path = folder / "game.tw-pddl"
    if task_type not in TASK_TYPES or not game_path.is_file():
        return None
    game = json.loads(game_path.read_text(encoding="utf-8"))
    if not game.get("solvable"):
        return None
    sentence = task_sentence(game.get("grammar", ""))
    if sentence is None:
        logger.warning("skipping %s: its grammar states no task", game_path)
        return None
    split_root = data_root / DATA_DIR / split
    return GameRow(id=f"{split}/{folder.relative_to(split_root).as_posix()}", question=sentence,
                   split=split, task_type=task_type,
                   game=game_path.relative_to(data_root).as_posix())


def discover_games(data_root: Path) -> dict[str, list[GameRow]]:
    """Games per source split, sorted by id."""
    folders = []
    for split in SOURCE_SPLITS:
        split_root = data_root / DATA_DIR / split
        if split_root.is_dir():
            folders += [(split, Path(root)) for root, _, files in os.walk(split_root)
                        if "traj_data.json" in files]
    if not folders:
        raise MissingDataError(missing_data_message(data_root))
    games: dict[str, list[GameRow]] = {split: [] for split in SOURCE_SPLITS}
    for split, folder in tqdm(sorted(folders), desc="games", unit="game"):
        relative = folder.relative_to(data_root).as_posix()
        if "movable" in relative or "Sliced" in relative:
            continue
        row = _read_game(folder, data_root, split)
        if row is not None:
            games[split].append(row)
    if not any(games.values()):
        raise MissingDataError(missing_data_message(data_root))
    return {split: sorted(rows, key=lambda r: r.id) for split, rows in games.items()}


def output_splits(games: dict[str, list[GameRow]],
                  subsets: tuple[AlfworldSubset, ...] = ()) -> dict[str, list[GameRow]]:
    """The five splits, then each subset: the first `games` rows of its split."""
    train = games["train"]
    splits = {"train": train,
              "train_seen": [r for r in train if r.task_type in SEEN_TYPES],
              "train_unseen": [r for r in train if r.task_type in UNSEEN_TYPES],
              "valid_seen": games["valid_seen"], "valid_unseen": games["valid_unseen"]}
    for subset in subsets:
        rows = splits[subset.split]
        if len(rows) < subset.games:
            raise SubsetError(f"subset {subset.name} takes the first {subset.games} games of "
                              f"{subset.split}, which holds {len(rows)}: generate more "
                              "(--per-type) or lower alfworld.subsets' games")
        splits[subset.name] = rows[:subset.games]
    return splits


def _write_atomic(path: Path, text: str) -> bool:
    """Replace `path` by `text` atomically unless it already holds exactly that; whether it
    was written."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import pandas as pd

    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pd.DataFrame(rows, columns=["id", "question", "prompt", "metadata"]).to_parquet(tmp)
    os.replace(tmp, path)


def prepare(data_root: str | Path, prepared_dir: str | Path,
            subsets: tuple[AlfworldSubset, ...] = ()) -> dict:
    """Write the five JSONL splits, the `subsets` and `manifest.json`; returns the manifest."""
    data_root, prepared_dir = Path(data_root), Path(prepared_dir)
    splits = output_splits(discover_games(data_root), subsets)
    prepared_dir.mkdir(parents=True, exist_ok=True)
    with_parquet = all(importlib.util.find_spec(m) for m in ("pandas", "pyarrow"))
    manifest: dict = {"data_root": str(data_root), "splits": {}, FILES_KEY: {}}
    unchanged = []
    for name, rows in splits.items():
        records = [row.to_json() for row in rows]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        manifest[FILES_KEY][name] = file_entry(text.encode("utf-8"))
        written = _write_atomic(prepared_dir / f"{name}.jsonl", text)
        parquet = prepared_dir / f"{name}.parquet"
        if with_parquet and (written or not parquet.is_file()):
            _write_parquet(parquet, records)
        if not written:
            unchanged.append(name)
        by_type = Counter(row.task_type for row in rows)
        manifest["splits"][name] = {"games": len(rows),
                                    "by_task_type": dict(sorted(by_type.items()))}
        if not rows:
            logger.warning("split %s is empty", name)
    _write_atomic(prepared_dir / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    if unchanged:
        logger.info("prepared splits unchanged, kept as they were: %s", ", ".join(unchanged))
    return manifest


def resolve_data_root(cli_value: str | None, config_value: str) -> Path:
    """--data-root, else $ALFWORLD_DATA, else the config's alfworld.data_root."""
    return Path(cli_value or os.environ.get("ALFWORLD_DATA") or config_value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", required=True, help="YAML config (alfworld section)")
    parser.add_argument("--data-root", help="ALFWorld data root (default: $ALFWORLD_DATA, "
                                            "then alfworld.data_root)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    cfg = load_config(args.config).alfworld
    data_root = resolve_data_root(args.data_root, cfg.data_root)
    try:
        manifest = prepare(data_root, cfg.prepared_dir, cfg.subsets)
    except (MissingDataError, SubsetError) as err:
        raise SystemExit(f"error: {err}") from None
    for name, info in manifest["splits"].items():
        logger.info("%s: %d games %s", name, info["games"], info["by_task_type"])
    logger.info("wrote %s", cfg.prepared_dir)


if __name__ == "__main__":
    main()
