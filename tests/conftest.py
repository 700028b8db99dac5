"""Session fixtures shared by every test folder.

`alfworld_data`: a root of generated ALFWorld games with prepared splits. It is
`data/alfworld_generated` when that dataset is complete (its READY marker), else a small set made
once by the project's generator (all six task types; every game proven by the planner and replayed
in the real engine) under `data/test_alfworld/`, which later runs reuse. CI generates it once; a
file lock keeps concurrent sessions (several on one machine) from generating it at the same time,
which once left a game's folder empty.

`contract_config` / `retrieval_server` / `real_servers`: a config on free loopback ports over those
games, the real retrieval server (MiniLM cache built once) and the real ALFWorld router + workers,
started through their launchers and stopped by them, for the whole session.

The quick tier (`bash scripts/test.sh quick`, for the edit-test loop) leaves out the modules in
`END_TO_END`, which start real servers, run the main job (the learning canary), generate and
replay games or run benchmarks; they carry the `end_to_end` marker. On 2 cores (2026-12-06, 3
xdist workers, a set-up venv): the quick tier 63 s wall, 120 s of CPU.
The full suite (`bash scripts/test.sh`) is what CI runs. scripts/test.sh runs both on every core
(pytest-xdist): a run-wide artefact made under the checkout (the games below, a converted model)
is made under a file lock, once, and read by every worker; one made for a single run (the README's
`--help` forms, the overlay checks' child pytest) goes through tests/run_wide.py.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolving_rl.config import Config, load_config
from tests.servers import alfworld_servers, contract_config_file

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
    TEST_DATA.parent.mkdir(parents=True, exist_ok=True)
    with open(TEST_DATA.parent / ".test_alfworld.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one generator at a time: concurrent sessions share it
        if not (TEST_DATA / "READY").is_file():
            _generate_test_data(TEST_DATA)
    return TEST_DATA


@pytest.fixture(scope="session")
def contract_config_path(tmp_path_factory, alfworld_data) -> Path:
    return contract_config_file(tmp_path_factory.mktemp("contract"), alfworld_data)


@pytest.fixture(scope="session")
def contract_config(contract_config_path) -> Config:
    return load_config(contract_config_path)


@pytest.fixture(scope="session")
def retrieval_server(contract_config_path, contract_config):
    """The real retrieval server over the generated tasks, for the whole session."""
    from env.retrieval.launcher import start_retrieval_server, stop_retrieval_server

    subprocess.run([sys.executable, "-m", "evolving_rl.retrieval.build", "--config",
                    str(contract_config_path)], check=True, cwd=ROOT, timeout=300,
                   stdout=subprocess.DEVNULL)
    try:  # a start cut short (the test's timeout) still stops what it started
        start_retrieval_server(contract_config)
        yield contract_config_path
    finally:
        stop_retrieval_server(contract_config)


@pytest.fixture(scope="session")
def real_servers(retrieval_server):
    """Retrieval + ALFWorld servers for the whole session."""
    try:  # as above: stopped by their PID files however far the start got
        alfworld_servers("start", retrieval_server)
        yield retrieval_server
    finally:
        alfworld_servers("stop", retrieval_server)


END_TO_END = frozenset({
    "tests/test_benchmarks.py", "tests/evaluate/test_evaluate_web.py",
    "tests/evaluate/test_evaluate_alfworld.py", "tests/alfworld/test_servers.py",
    "tests/alfworld/test_generate.py", "tests/alfworld/test_engine.py",
    "tests/pipeline/test_pipeline_contract.py", "tests/pipeline/test_pipeline_contract_web.py",
    "tests/pipeline/test_pipeline_expert_real.py", "tests/slime/test_hooks_end_to_end.py",
    "tests/retrieval/test_retrieval_server.py", "tests/test_http_server.py",
    "tests/test_readme_commands.py",
    # the main job (the learning canary as a subprocess; twice in-process, the determinism
    # check), real server processes, a benchmark
    "tests/local/test_probe_canary.py", "tests/local/test_determinism.py",
    "tests/slime/test_top_p_replay.py",
    "tests/mind2web/test_server.py", "tests/retrieval/test_retrieval_stop.py",
    "tests/test_rollout_benchmark.py",
})


LIVE_SERVERS = frozenset({"retrieval_server", "real_servers"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "end_to_end: left out of the quick tier (conftest)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).relative_to(ROOT).as_posix() in END_TO_END:
            item.add_marker(pytest.mark.end_to_end)
    # The tests on the session's live servers first, together (a stable sort: the order within
    # each part is kept). Each xdist worker that runs one starts its own set: a retrieval cache
    # build, the retrieval server, an ALFWorld router and two workers, ~12 s of CPU. xdist hands
    # each worker a contiguous share of the collection, so together they fall in the first
    # worker's share and one set is started instead of one per worker. `-p randomly` shuffles
    # after this hook, so a random order stays random.
    items.sort(key=lambda item: not LIVE_SERVERS.intersection(getattr(item, "fixturenames", ())))
