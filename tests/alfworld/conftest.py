"""Shared ALFWorld test fixtures: a set of generated games, and real servers on loopback.

`alfworld_root`: a private copy of the shared generated games (`alfworld_data` in
tests/conftest.py: all six task types, proven by the Fast Downward planner).
`launch_servers`: starts router + workers as real processes through the launcher on free
loopback ports, and always stops them by PID file.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

pytest.importorskip("alfworld")
pytest.importorskip("fast_downward")

from env.alfworld import launch  # noqa: E402
from env.launch import free_port_block  # noqa: E402
from evolving_rl.config import Config, parse_config  # noqa: E402

DATA_DIR = "json_2.1.1"


@dataclass(frozen=True)
class Game:
    key: str
    task_type: str
    walkthrough: list[str]


def _games(root: Path) -> list[Game]:
    games = []
    for path in sorted((root / DATA_DIR).glob("*/*/*/game.tw-pddl")):
        data = json.loads(path.read_text())
        traj = json.loads((path.parent / "traj_data.json").read_text())
        games.append(Game(str(path.relative_to(root)), traj["task_type"], data["walkthrough"]))
    return games


@pytest.fixture(scope="session")
def alfworld_root(tmp_path_factory, alfworld_data) -> Path:
    """A private data root (tests add files to it): a copy of the shared generated games."""
    root = tmp_path_factory.mktemp("alfworld_games")
    shutil.copytree(alfworld_data / DATA_DIR, root / DATA_DIR)
    return root


@pytest.fixture(scope="session")
def fresh_copy(alfworld_root) -> Callable[[Game, str], str]:
    """`fresh_copy(game, tag)`: a copy of `game` under a new folder, i.e. a key that no worker
    has translated yet; returns its key."""

    def _copy(game: Game, tag: str) -> str:
        source = (alfworld_root / game.key).parent
        target = source.parent.parent / f"{source.parent.name}-{tag}" / source.name
        shutil.copytree(source, target)
        return str((target / "game.tw-pddl").relative_to(alfworld_root))

    return _copy


@pytest.fixture(scope="session")
def alfworld_games(alfworld_root) -> list[Game]:
    games = _games(alfworld_root)
    assert len({g.task_type for g in games}) == 6, "need games of all six task types"
    return games


@dataclass(frozen=True)
class Servers:
    """A running router + workers started by the launcher."""

    url: str
    cfg: Config
    log_dir: Path

    def health(self) -> dict:
        return requests.get(f"{self.url}/health", timeout=5).json()

    def worker_url(self, index: int) -> str:
        return self.health()["workers"][index]["url"]

    def post(self, path: str, payload: object, base: str | None = None,
             **kwargs) -> requests.Response:
        return requests.post(f"{base or self.url}{path}", json=payload,
                             timeout=kwargs.pop("timeout", 30), **kwargs)


@pytest.fixture(scope="module")
def launch_servers(tmp_path_factory, alfworld_root) -> Iterator[Callable[..., Servers]]:
    """Factory: `launch_servers(n_workers=2, **alfworld settings)`; all stopped at module end."""
    started: list[Servers] = []

    def _start(**settings) -> Servers:
        run = tmp_path_factory.mktemp("alfworld_servers")
        router = free_port_block(1 + settings.get("n_workers", 2))
        base = router + 1
        values = {"data_root": str(alfworld_root), "port": router,
                  "worker_base_port": base, "log_dir": str(run / "logs"),
                  "health_interval_s": 0.3, "start_timeout_s": 60, **settings}
        cfg = parse_config({"environment": "alfworld", "alfworld": values})
        launch.start(cfg)
        servers = Servers(f"http://127.0.0.1:{router}", cfg, run / "logs")
        started.append(servers)
        return servers

    yield _start
    for servers in started:
        launch.stop(servers.cfg)
