"""tests/run_wide.py: a value made once per run, read back by every later caller; a failed or
timed-out make reported once, every later caller skipped with its cause."""

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


@pytest.mark.parametrize("error", [RuntimeError("broke"),
                                   pytest.fail.Exception("Timeout >300.0s")])  # pytest-timeout's
def test_a_failed_make_fails_its_caller_once_and_skips_every_later_one(tmp_path_factory, error):
    made = []

    def failing(folder):
        made.append(folder)
        raise error

    name = f"failed_{type(error).__name__}"
    with pytest.raises(type(error)):
        run_wide.once(tmp_path_factory, name, failing)
    for _ in range(2):
        with pytest.raises(pytest.skip.Exception, match=f"{name} failed.*{error}"):
            run_wide.once(tmp_path_factory, name, failing)
    assert len(made) == 1


def test_a_caller_whose_timeout_comes_while_another_makes_it_is_skipped(tmp_path_factory,
                                                                         monkeypatch):
    def timed_out(file, operation):
        raise pytest.fail.Exception("Timeout >300.0s")

    monkeypatch.setattr(run_wide.fcntl, "flock", timed_out)
    with pytest.raises(pytest.skip.Exception, match="Timeout >300.0s while another worker"):
        run_wide.once(tmp_path_factory, "waited", lambda folder: 1)


def test_workers_of_a_run_share_the_parent_of_their_base_folders(tmp_path_factory, monkeypatch):
    base = tmp_path_factory.getbasetemp()
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert run_wide.shared_folder(tmp_path_factory) == base
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert run_wide.shared_folder(tmp_path_factory) == base.parent
