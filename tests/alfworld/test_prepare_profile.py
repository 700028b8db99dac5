"""configs/alfworld_1gpu.yaml's data commands, run as its recipe profile writes them (scripts
included, in a sandbox checkout: tests/profile_data.py): they make every split the profile names
(slime's train and evaluation splits, the evaluation's and the retrieval's), valid_small the
first 8 games of valid_unseen, and the retrieval cache of every prepared task.

The generation asks fewer games than the recipe (1 a type, 2 in valid_unseen: the fewest whose
valid_unseen holds valid_small's 8 over six types) so that it takes seconds; valid_small at the
recipe's own counts: tests/alfworld/test_prepare.py.
"""

from __future__ import annotations

import json

import pytest

from env.alfworld.prepare import TASK_TYPES
from evolving_rl.config import load_config
from evolving_rl.retrieval.cache import load_cache
from tests.profile_data import ROOT, DataSandbox, prepared_rows, profile_commands, profile_splits

pytestmark = pytest.mark.end_to_end
CONFIG = ROOT / "configs/alfworld_1gpu.yaml"
PER_TYPE = {"train": 1, "valid_seen": 1, "valid_unseen": 2}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> DataSandbox:
    """The profile's data commands run in a sandbox, the generation's counts lowered."""
    box = DataSandbox(tmp_path_factory.mktemp("alfworld_1gpu"), "alfworld", CONFIG)
    [prepare] = profile_commands(CONFIG, "scripts/alfworld/prepare_data.sh")
    [cache] = profile_commands(CONFIG, "scripts/alfworld/build_cache.sh")
    argv = list(prepare.argv)
    argv[argv.index("--per-type") + 1] = ",".join(f"{k}={v}" for k, v in PER_TYPE.items())
    box.run(argv)
    box.run(cache.argv)
    return box


def test_every_split_the_profile_names_is_made(sandbox):
    prepared_dir, named = profile_splits(CONFIG, "scripts/alfworld/train_alfworld.sh")
    assert prepared_dir == load_config(CONFIG).alfworld.prepared_dir  # what prepare writes
    assert named == {"train", "train_seen", "valid_unseen", "valid_small"}
    prepared = sandbox.root / prepared_dir
    manifest = json.loads((prepared / "manifest.json").read_text())
    for split in named:
        assert prepared_rows(prepared, split), split
    expected = {"train": len(TASK_TYPES), "valid_seen": len(TASK_TYPES),
                "valid_unseen": 2 * len(TASK_TYPES), "train_seen": 4, "valid_small": 8}
    assert {s: manifest["splits"][s]["games"] for s in expected} == expected


def test_valid_small_is_the_first_games_of_valid_unseen(sandbox):
    prepared = sandbox.root / load_config(CONFIG).alfworld.prepared_dir
    unseen = prepared_rows(prepared, "valid_unseen")
    assert prepared_rows(prepared, "valid_small") == unseen[:8]
    assert [row["metadata"]["task_type"] for row in unseen[:8]] == [
        t for t in sorted(TASK_TYPES) for _ in range(2)][:8]
    for row in unseen[:8]:  # generated, playable games
        assert (sandbox.root / "data/alfworld" / row["metadata"]["game"]).is_file()


def test_the_retrieval_cache_holds_every_prepared_task(sandbox):
    cfg = load_config(CONFIG)
    cache = load_cache(sandbox.root / cfg.retrieval.cache_path)
    prepared = sandbox.root / cfg.alfworld.prepared_dir
    ids = {row["id"] for path in prepared.glob("*.jsonl")
           for row in prepared_rows(prepared, path.stem)}
    assert {row.id for row in cache.rows} == ids
