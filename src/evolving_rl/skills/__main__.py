"""Command line over a run's skill library (stdout is the product; diagnostics are logged).

    python -m evolving_rl.skills list   --run-dir runs/local_cpu [--task-type T] [--min-reward R]
                                        [--audit ok|failed|any] [--usable] [--sort reward|rollout]
                                        [--limit N] [--json]
    python -m evolving_rl.skills search QUERY --run-dir D [--mode text|embedding] [--top-k K]
                                        [--config C] [the list filters] [--json]
    python -m evolving_rl.skills show   ID --run-dir D      # ID: rollout:source_id:skill_index,
                                        # its start (one id's) or the row `list` prints
    python -m evolving_rl.skills export --run-dir D --out D/skills.jsonl --top N
                                        [--task-type T] [--force]

`--library PATH` names a library file instead of `--run-dir` (its skill_library.jsonl).
Embedding search loads the encoder of `retrieval.*` in `--config` (default: the schema's,
MiniLM on the CPU). An export is a library file in the same format, holding the best usable
skill of each source task (the one evaluation would pick), the `top` by reward: evaluate with it
through `SkillLibrary(FILE)`. Mistakes (no library, unknown id, an id prefix that starts several
ids, a filter nothing has, an export with no usable skill: nothing is written) exit 2, as does a
library record of the wrong types (one line naming the file, line and field).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from evolving_rl.config import ConfigError, load_config, parse_config
from evolving_rl.pipeline.skill_library import SkillLibrary, SkillLibraryError, SkillRecord
from evolving_rl.retrieval.encoder import ModelLoadError, load_encoder
from evolving_rl.skills import render
from evolving_rl.skills.search import embedding_search, text_search
from evolving_rl.skills.select import (
    AUDIT_CHOICES,
    SORT_CHOICES,
    RecordFilter,
    SelectionError,
    export_selection,
    filter_records,
    find_record,
    library_rows,
    sort_records,
)

logger = logging.getLogger("evolving_rl.skills")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _source_parser() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    where = parent.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-dir", type=Path, help="a run folder holding skill_library.jsonl")
    where.add_argument("--library", type=Path, help="a skill library file (JSONL)")
    parent.add_argument("--verbose", action="store_true", help="log diagnostics to stderr")
    return parent


def _filter_parser() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--task-type", help="only skills of source tasks of this type")
    parent.add_argument("--min-reward", type=float, help="only skills rewarded at least this")
    parent.add_argument("--audit", choices=AUDIT_CHOICES, default="any",
                        help="audit result (failed: parsed, card rejected)")
    parent.add_argument("--usable", action="store_true", help="only parsed and audited skills")
    parent.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.skills", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    source, filters = _source_parser(), _filter_parser()
    listing = commands.add_parser("list", parents=[source, filters], help="filter and sort")
    listing.add_argument("--sort", choices=SORT_CHOICES, default="reward")
    listing.add_argument("--limit", type=_positive, help="at most this many rows")
    search = commands.add_parser("search", parents=[source, filters], help="find by a query")
    search.add_argument("query")
    search.add_argument("--mode", choices=("text", "embedding"), default="text")
    search.add_argument("--top-k", type=_positive, default=10)
    search.add_argument("--config", type=Path, help="YAML config whose retrieval.* embeds")
    show = commands.add_parser("show", parents=[source], help="one skill as its card")
    show.add_argument("id", help="rollout:source_id:skill_index, its start, or the list's row")
    export = commands.add_parser("export", parents=[source], help="write a library file")
    export.add_argument("--out", type=Path, required=True, help="the library file to write")
    export.add_argument("--top", type=_positive, required=True, help="how many skills")
    export.add_argument("--task-type", help="only skills of source tasks of this type")
    export.add_argument("--force", action="store_true", help="replace an existing --out")
    return parser


def _load(args: argparse.Namespace) -> list[SkillRecord]:
    library = SkillLibrary.in_run_dir(args.run_dir) if args.run_dir else SkillLibrary(args.library)
    if not library.path.is_file():
        raise SelectionError(f"no skill library at {library.path}")
    try:
        records = library.load()
    except SkillLibraryError as err:  # names the file, line and field
        raise SelectionError(str(err)) from None
    except UnicodeDecodeError as err:
        raise SelectionError(f"{library.path} is not a skill library: {err}") from None
    logger.info("%d records in %s", len(records), library.path)
    return records


def _record_filter(args: argparse.Namespace) -> RecordFilter:
    return RecordFilter(args.task_type, args.min_reward, args.audit, args.usable)


def _rows(records: Sequence[SkillRecord], rows: Mapping[int, int], as_json: bool,
          scores: Sequence[float] | None = None) -> str:
    if as_json:
        out = [render.as_json(r, rows[id(r)], scores[i] if scores else None)
               for i, r in enumerate(records)]
        return json.dumps(out, ensure_ascii=False, indent=1) + "\n"
    return render.table(records, rows, scores)


def _search(args: argparse.Namespace, records: list[SkillRecord]) -> str:
    kept = filter_records(records, _record_filter(args))
    if args.mode == "text":
        found = text_search(kept, args.query, args.top_k)
    else:
        cfg = load_config(args.config) if args.config else parse_config({})
        found = embedding_search(kept, args.query, args.top_k, load_encoder(cfg.retrieval),
                                 show_progress=True)
    return _rows([f.record for f in found], library_rows(records), args.json,
                 [f.score for f in found])


def _export(args: argparse.Namespace, records: list[SkillRecord]) -> str:
    if args.out.is_dir() or (args.out.exists() and not args.force):
        raise SelectionError(f"--out {args.out} exists (pass --force to replace a file)")
    chosen = export_selection(records, args.top, args.task_type)
    if not chosen:
        usable = sum(1 for record in records if record.usable)
        raise SelectionError(
            f"nothing exported, {args.out} not written: none of the {len(records)} skills "
            + (f"of task type {args.task_type} " if args.task_type else "")
            + f"is usable and rewarded (parsed, passed the audit and was played downstream; "
            f"{usable} of the library's skills are usable)")
    partial = args.out.with_name(args.out.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)
    SkillLibrary(partial).append(chosen)
    partial.touch()
    partial.replace(args.out)
    return f"exported {len(chosen)} skills of {len(records)} to {args.out}\n"


def run(args: argparse.Namespace) -> str:
    """The command's output text."""
    records = _load(args)
    if args.command == "list":
        kept = sort_records(filter_records(records, _record_filter(args)), args.sort)
        return _rows(kept[:args.limit], library_rows(records), args.json)
    if args.command == "search":
        return _search(args, records)
    if args.command == "show":
        return render.card(find_record(records, args.id))
    return _export(args, records)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        text = run(args)
    except (SelectionError, ConfigError, ModelLoadError) as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
