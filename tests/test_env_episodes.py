"""The servers' one episode table (env/episodes.py): capacity counts resets in flight, a reset
whose client left is dropped, idle episodes are evicted, unknown ids are 404; ALFWorld's worker
table only names its ids (another boot of the worker: 410)."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from env.alfworld.episodes import WorkerEpisodes
from env.episodes import EpisodeTable
from env.wire import WireError

ROOT = Path(__file__).resolve().parents[1]


def test_capacity_counts_resets_in_flight():
    table: EpisodeTable[str] = EpisodeTable(2, ttl_s=60, retry_after_s=3)
    table.add("a")
    table.reserve()
    with pytest.raises(WireError) as full:
        table.add("b")
    assert (full.value.status, full.value.code, full.value.retry_after_s) == (503, "server_full", 3)
    assert "the server holds its capacity of 2" in full.value.message
    assert table.admit("b", still_wanted=False) is None and table.dropped_resets == 1
    assert len(table) == 1 and table.reserved == 0


def test_get_pop_and_unknown_ids():
    table: EpisodeTable[str] = EpisodeTable(4, ttl_s=60, retry_after_s=1)
    episode_id = table.add("a")
    assert table.get(episode_id) == "a" and table.pop(episode_id) == "a"
    with pytest.raises(WireError) as gone:
        table.get(episode_id)
    assert (gone.value.status, gone.value.code, gone.value.field) == (
        404, "unknown_episode", "episode_id")


def test_idle_episodes_are_evicted_and_used_ones_kept():
    table: EpisodeTable[str] = EpisodeTable(4, ttl_s=0.3, retry_after_s=1)
    idle, used = table.add("idle"), table.add("used")
    for _ in range(3):
        time.sleep(0.15)
        table.get(used)
    assert table.evict_idle() == 1 and table.evicted == 1
    assert table.get(used) == "used"
    with pytest.raises(WireError):
        table.get(idle)


def test_a_worker_tells_its_past_boots_from_other_ids():
    table = WorkerEpisodes(3, capacity=1, ttl_s=60, retry_after_s=1)
    episode_id = table.add(object())
    index, boot, _ = episode_id.split("-")
    assert index == "3" and boot == table.boot
    with pytest.raises(WireError) as full:
        table.reserve()
    assert full.value.code == "worker_full" and "worker 3 holds" in full.value.message
    other_boot = "0" * 8 if boot != "0" * 8 else "1" * 8
    with pytest.raises(WireError) as lost:
        table.get(f"3-{other_boot}-{'a' * 16}")
    assert lost.value.status == 410
    with pytest.raises(WireError) as unknown:
        table.get(f"4-{boot}-{'a' * 16}")
    assert unknown.value.status == 404


def test_one_episode_table_class():
    defined = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "env").rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef) and node.name == "EpisodeTable"]
    assert defined == ["env/episodes.py"]
