"""Game generation is all or nothing, and a job whose held-out split holds no task (item 3) or
whose split lost lines (item 6) stops with exit 2 instead of evaluating 0 cases (issue 60). The
generator's jobs are replaced by fakes that write a game file each: these tests are about where
the games land, not how they are made."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("fast_downward")

import env.alfworld.generate as generate  # noqa: E402
import evolving_rl.local.job as job  # noqa: E402
from env.alfworld.generate import DATA_DIR, generate_dataset  # noqa: E402
from evolving_rl.local.__main__ import main  # noqa: E402
from evolving_rl.retrieval.prepared import file_entry  # noqa: E402


class Killed(BaseException):
    """The generation's process was killed here."""


class InlinePool:
    """A pool running its jobs in this process, killed after `kill_after` of them."""

    def __init__(self, kill_after: int | None) -> None:
        self.kill_after = kill_after

    def __enter__(self) -> InlinePool:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def imap_unordered(self, work, jobs):
        for done, item in enumerate(jobs):
            if done == self.kill_after:
                raise Killed
            yield work(item)


def _fake_job(item, out_root: Path, settings) -> generate.JobResult:
    split, task_type, index = item
    trial = out_root / DATA_DIR / split / f"{task_type}-Mug-None-Desk-{index}" / "trial_1"
    trial.mkdir(parents=True)
    (trial / "game.tw-pddl").write_text("{}")
    return generate.JobResult(split, task_type, str(trial), ())


@pytest.fixture
def fake_jobs(monkeypatch):
    def pool(kill_after: int | None) -> None:
        monkeypatch.setattr(generate, "_spawn_pool", lambda _workers: InlinePool(kill_after))
    monkeypatch.setattr(generate, "run_job", _fake_job)
    return pool


def _games(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob(f"{DATA_DIR}/*/*/*/game.tw-pddl"))


def test_a_generation_killed_midway_leaves_no_game_in_the_data_root(tmp_path, fake_jobs):
    fake_jobs(kill_after=4)  # 4 of the 9 games made (3 splits x 3 types)
    with pytest.raises(Killed):
        generate_dataset(tmp_path, 1, task_types=("a", "b", "c"))
    assert _games(tmp_path) == []  # the next run generates again instead of using 4 games


def test_a_finished_generation_moves_every_game_into_place(tmp_path, fake_jobs):
    (tmp_path / DATA_DIR / "train").mkdir(parents=True)  # left by an earlier interrupted run
    fake_jobs(kill_after=None)
    generate_dataset(tmp_path, 1, task_types=("a", "b", "c"))
    assert len(_games(tmp_path)) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([DATA_DIR, generate.REPORT_FILE])
    generate_dataset(tmp_path, {"train": 2}, task_types=("a",))  # added to an existing set
    assert len(_games(tmp_path)) == 10


class PastTheData(Exception):
    """The job went on to build its retrieval cache."""


ROW = '{"id": "t0", "question": "q", "metadata": {"task_type": "a", "game": "g"}}\n'


def _empty_held_out(prepared: Path) -> str:
    (prepared / "train.jsonl").write_text(ROW)
    (prepared / "valid_unseen.jsonl").write_text("")  # its games were never made
    (prepared / "valid_seen.jsonl").write_text("")
    return (f"the held-out split 'valid_unseen' ({prepared / 'valid_unseen.jsonl'}) holds no "
            "task, so the evaluation would score 0 cases")


def _lost_lines(prepared: Path) -> str:
    """A split whose manifest counts 2 lines, 1 left (issue 60, item 6)."""
    (prepared / "train.jsonl").write_text(ROW)
    (prepared / "manifest.json").write_text(json.dumps(
        {"files": {"train": file_entry((ROW + ROW.replace("t0", "t1")).encode())}}))
    return (f"{prepared / 'train.jsonl'} holds 1 lines but {prepared / 'manifest.json'} says 2")


@pytest.mark.parametrize("damage", [_empty_held_out, _lost_lines])
def test_prepared_data_the_job_cannot_use_ends_it_with_exit_2(tmp_path, monkeypatch, caplog,
                                                              damage):
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    message = damage(prepared)
    services = type("Services", (), {"prepare_data": staticmethod(lambda _cfg: None)})
    monkeypatch.setattr(job, "env_services", lambda _cfg: services)
    monkeypatch.setattr(job, "preflight", lambda _cfg, _services: None)

    def cache(*_args) -> None:
        raise PastTheData
    monkeypatch.setattr(job, "build_retrieval_cache", cache)
    with caplog.at_level(logging.ERROR):
        code = main(["--config", "configs/local_cpu.yaml", "--set",
                     f"alfworld.prepared_dir={prepared}", "--set",
                     f"run.output_dir={tmp_path / 'run'}", "--set", "run.tensorboard=false"])
    assert code == 2
    assert message in caplog.records[-1].getMessage()
