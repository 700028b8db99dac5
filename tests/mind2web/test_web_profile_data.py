"""configs/web_1gpu.yaml's data commands, run exactly as its recipe profile writes them (scripts
included, in a sandbox checkout: tests/profile_data.py): generated tasks in the official layout,
prepared, and the retrieval cache; every split the profile names (slime's train and evaluation
splits, the evaluation's and the retrieval's) is made, at the counts the profile states, where
the launch reads it.
"""

from __future__ import annotations

import pytest

from evolving_rl.config import load_config
from evolving_rl.retrieval.cache import load_cache
from tests.profile_data import ROOT, DataSandbox, prepared_rows, profile_commands, profile_splits

pytestmark = pytest.mark.end_to_end
CONFIG = ROOT / "configs/web_1gpu.yaml"
# The counts of the profile's `--tasks 40` (env/mind2web/generate.py split_counts).
COUNTS = {"train": 22, "test_task": 6, "test_website": 4, "test_domain": 8}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> DataSandbox:
    box = DataSandbox(tmp_path_factory.mktemp("web_1gpu"), "web", CONFIG)
    for script in ("scripts/web/prepare_data.sh", "scripts/web/build_cache.sh"):
        [command] = profile_commands(CONFIG, script)
        assert not command.env
        box.run(command.argv)
    return box


def test_every_split_the_profile_names_is_made(sandbox):
    cfg = load_config(CONFIG)
    prepared_dir, named = profile_splits(CONFIG, "scripts/web/train_web.sh")
    assert prepared_dir == cfg.mind2web.prepared_dir  # the launch reads what prepare writes
    assert named == {"train", "test_task"}
    prepared = sandbox.root / prepared_dir
    assert {split: len(prepared_rows(prepared, split)) for split in COUNTS} == COUNTS
    for row in prepared_rows(prepared, "all"):  # the official layout, the test zip extracted
        assert (sandbox.root / cfg.mind2web.data_root / row["metadata"]["source_file"]).is_file()


def test_the_retrieval_cache_holds_every_prepared_task(sandbox):
    cfg = load_config(CONFIG)
    cache = load_cache(sandbox.root / cfg.retrieval.cache_path)
    assert {row.id for row in cache.rows} == {
        row["id"] for row in prepared_rows(sandbox.root / cfg.mind2web.prepared_dir, "all")}
