"""tests/run_wide.py: a value made once per run, read back by every later caller."""

from __future__ import annotations

import threading

import pytest

from tests import run_wide


def test_a_value_is_made_once_and_each_caller_gets_its_own_copy(tmp_path_factory):
    made = []

    def make(folder):
        made.append(folder)
        (folder / "artefact").write_text("x")
        return {"items": [1, 2]}

    tmp_path_factory.getbasetemp()  # made on first use, which threads would race to do
    values = []
    callers = [threading.Thread(target=lambda: values.append(
        run_wide.once(tmp_path_factory, "made_once", make))) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(made) == 1 and (made[0] / "artefact").read_text() == "x"
    assert values == [{"items": [1, 2]}] * 4
    values[0]["items"].append(3)
    assert run_wide.once(tmp_path_factory, "made_once", make) == {"items": [1, 2]}


def test_a_failed_make_leaves_nothing_and_the_next_caller_makes_it_afresh(tmp_path_factory):
    def failing(folder):
        (folder / "partial").write_text("half")
        raise RuntimeError("broke")

    with pytest.raises(RuntimeError):
        run_wide.once(tmp_path_factory, "retried", failing)
    assert run_wide.once(tmp_path_factory, "retried",
                         lambda folder: sorted(p.name for p in folder.iterdir())) == []


def test_workers_of_a_run_share_the_parent_of_their_base_folders(tmp_path_factory, monkeypatch):
    base = tmp_path_factory.getbasetemp()
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert run_wide.shared_folder(tmp_path_factory) == base
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert run_wide.shared_folder(tmp_path_factory) == base.parent
