"""Generate a synthetic Mind2Web dataset in the official layout (for tests and the CPU profile).

Owns the layout: `<out>/data/train/train_<i>.json` (each a JSON list of tasks) and the test
set as a password-protected (ZipCrypto) zip `<out>/test.zip` (where the published dataset keeps
it; `zip_at="data"`: `<out>/data/test.zip`, where users also put it) holding `test_task/`,
`test_website/` and `test_domain/` folders of JSON lists — what the official download gives, so
the preparation code and the env server cannot tell the difference. Tasks come from
`env.mind2web.tasks`; test_task reuses the training websites, test_website holds websites out,
test_domain holds whole domains out. Deterministic by seed. `distractors` (elements added to
every page) is the size knob: about 0.5 KB of JSON per distractor per step, so
`--splits train --tasks 1000 --distractors 250 --tasks-per-file 1000` writes a ~500 MB file.
Files are streamed task by task, so generating a large split needs little memory.

    python -m env.mind2web.generate --out data/mind2web --tasks 40 --seed 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Literal

from tqdm import tqdm

from env.mind2web.sites import SPLIT_SITES
from env.mind2web.tasks import make_task
from env.mind2web.testzip import PASSWORD_ENV, TEST_SPLITS
from env.mind2web.zipcrypto import write_encrypted_zip

logger = logging.getLogger(__name__)

SPLITS = ("train", *TEST_SPLITS)
SPLIT_SHARES = {"train": 0.55, "test_task": 0.15, "test_website": 0.1, "test_domain": 0.2}
TEST_ZIP = "test.zip"
DEFAULT_PASSWORD = "mind2web-synthetic"
GENERATED_MARKER = ".generated"


@dataclass(frozen=True)
class GenerateSpec:
    """What to generate; `tasks` is the total over `splits`, shared out by SPLIT_SHARES."""

    tasks: int = 40
    seed: int = 0
    distractors: int = 24
    tasks_per_file: int = 25
    splits: tuple[str, ...] = SPLITS
    password: str = DEFAULT_PASSWORD
    zip_at: Literal["root", "data"] = "root"


@dataclass(frozen=True)
class GeneratedData:
    root: Path
    files: tuple[Path, ...]
    counts: dict[str, int]


def split_counts(spec: GenerateSpec) -> dict[str, int]:
    """Tasks per split: proportional to SPLIT_SHARES, at least one each, summing to `tasks`."""
    total = sum(SPLIT_SHARES[s] for s in spec.splits)
    counts = {s: max(1, int(spec.tasks * SPLIT_SHARES[s] / total)) for s in spec.splits}
    counts[spec.splits[0]] += max(0, spec.tasks - sum(counts.values()))
    return counts


def write_split(folder: Path, split: str, n_tasks: int, spec: GenerateSpec) -> list[Path]:
    """`<folder>/<split>_<i>.json` files of `tasks_per_file` tasks, written task by task."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = Random(f"{spec.seed}:{split}")
    sites = SPLIT_SITES[split]
    paths, written = [], 0
    with tqdm(total=n_tasks, desc=split, unit="task", disable=n_tasks < 100) as bar:
        while written < n_tasks:
            path = folder / f"{split}_{len(paths)}.json"
            in_file = min(spec.tasks_per_file, n_tasks - written)
            with path.open("w", encoding="utf-8") as fh:
                fh.write("[")
                for i in range(in_file):
                    task = make_task(sites[(written + i) % len(sites)], rng, spec.distractors)
                    fh.write(("," if i else "") + json.dumps(task))
                    bar.update()
                fh.write("]")
            paths.append(path)
            written += in_file
    return paths


def zip_path_for(out: Path, spec: GenerateSpec) -> Path:
    """Where `spec` puts the test zip under the root `out`."""
    return (out if spec.zip_at == "root" else out / "data") / TEST_ZIP


def _write_test_zip(data_dir: Path, target: Path, counts: dict[str, int],
                    spec: GenerateSpec) -> Path:
    with tempfile.TemporaryDirectory(dir=data_dir) as staging:
        members = {}
        for split in TEST_SPLITS:
            if split in counts:
                for path in write_split(Path(staging) / split, split, counts[split], spec):
                    members[f"{split}/{path.name}"] = path
        tmp = target.with_name(f".{TEST_ZIP}.tmp{os.getpid()}")
        write_encrypted_zip(tmp, members, spec.password, spec.seed)
        os.replace(tmp, target)
    return target


def _existing_files(out: Path, spec: GenerateSpec) -> tuple[Path, ...]:
    zip_path = zip_path_for(out, spec)
    return (tuple(sorted((out / "data" / "train").glob("*.json")))
            + ((zip_path,) if zip_path.is_file() else ()))


def generate(out: str | Path, spec: GenerateSpec = GenerateSpec()) -> GeneratedData:
    """Write the official layout under `out`.

    A `data/` folder this generator wrote (and its test zip) is replaced, or kept as it is when
    written with the same spec; any other non-empty `data/` or a root `test.zip` it did not
    write is refused (never overwrite real data).
    """
    unknown = set(spec.splits) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown splits {sorted(unknown)}; choose from {SPLITS}")
    data_dir, counts = Path(out) / "data", split_counts(spec)
    marker, stamp = data_dir / GENERATED_MARKER, json.dumps(dataclasses.asdict(spec))
    if marker.is_file() and marker.read_text() == stamp:
        logger.info("%s already holds this generated data", data_dir)
        return GeneratedData(root=Path(out), files=_existing_files(Path(out), spec),
                             counts=counts)
    root_zip = Path(out) / TEST_ZIP
    if not marker.is_file() and (root_zip.exists() or data_dir.exists() and any(
            data_dir.iterdir())):
        raise FileExistsError(f"refusing to replace {data_dir} or {root_zip}: not written by "
                              "this generator (official data?); choose another --out")
    shutil.rmtree(data_dir, ignore_errors=True)
    root_zip.unlink(missing_ok=True)
    data_dir.mkdir(parents=True)
    files = []
    if "train" in counts:
        files += write_split(data_dir / "train", "train", counts["train"], spec)
    if set(counts) & set(TEST_SPLITS):
        files.append(_write_test_zip(data_dir, zip_path_for(Path(out), spec), counts, spec))
    marker.write_text(stamp)
    logger.info("generated %s under %s", counts, data_dir)
    return GeneratedData(root=Path(out), files=tuple(files), counts=counts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, help="data root to write")
    parser.add_argument("--tasks", type=int, default=GenerateSpec.tasks, help="tasks in all")
    parser.add_argument("--seed", type=int, default=GenerateSpec.seed)
    parser.add_argument("--distractors", type=int, default=GenerateSpec.distractors,
                        help="extra elements per page (the size knob)")
    parser.add_argument("--tasks-per-file", type=int, default=GenerateSpec.tasks_per_file)
    parser.add_argument("--splits", default=",".join(SPLITS), help="comma-separated subset")
    parser.add_argument("--password", default=os.environ.get(PASSWORD_ENV, DEFAULT_PASSWORD),
                        help=f"test zip password (default: ${PASSWORD_ENV}, then a fixed one)")
    parser.add_argument("--zip-at", choices=("root", "data"), default=GenerateSpec.zip_at,
                        help="test.zip at the root (as published) or in data/")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    spec = GenerateSpec(tasks=args.tasks, seed=args.seed, distractors=args.distractors,
                        tasks_per_file=args.tasks_per_file, password=args.password,
                        zip_at=args.zip_at,
                        splits=tuple(s for s in args.splits.split(",") if s))
    if spec.tasks < len(spec.splits) or spec.tasks_per_file < 1 or spec.distractors < 0:
        parser.error("need --tasks >= number of splits, --tasks-per-file >= 1, --distractors >= 0")
    generate(args.out, spec)


if __name__ == "__main__":
    main()
