"""Session fixtures shared by every test folder.

`alfworld_data`: a root of generated ALFWorld games with prepared splits. It is
`data/alfworld_generated` when that dataset is complete (its READY marker), else a small set made
once by the project's generator (all six task types; every game proven by the planner and replayed
in the real engine) under `data/test_alfworld/`, which later runs reuse. CI generates it once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "data" / "alfworld_generated"
TEST_DATA = ROOT / "data" / "test_alfworld"
TEST_SEED = 11
TEST_PER_TYPE = {"train": 2, "valid_seen": 1, "valid_unseen": 1}


def _generate_test_data(root: Path) -> None:
    from env.alfworld.generate import generate_dataset
    from env.alfworld.prepare import prepare

    generate_dataset(root, TEST_PER_TYPE, seed=TEST_SEED, workers=min(2, os.cpu_count() or 1))
    prepare(root, root / "prepared")
    (root / "READY").write_text("test data set\n", encoding="utf-8")


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    pytest.importorskip("alfworld")
    pytest.importorskip("fast_downward")
    if (GENERATED / "READY").is_file():
        return GENERATED
    if not (TEST_DATA / "READY").is_file():
        _generate_test_data(TEST_DATA)
    return TEST_DATA
