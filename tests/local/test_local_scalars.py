"""The metrics log's scalar mirrors: TensorBoard event files read back equal the JSONL, W&B
through a fake module, a missing tensorboard package, and the archive of a previous run."""

from __future__ import annotations

import logging
import math
import sys
import types

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evolving_rl.local.job import archive_previous_run
from evolving_rl.local.metrics import MetricsLog
from evolving_rl.local.scalars import TENSORBOARD_DIR, open_sinks, scalar_values

RECORDS = [("eval", 0, {"phase": "before", "eval/all/with_skill_success_mean": 0.25}),
           ("train", 1, {"solver/reward_mean": 0.5, "groups/count": 4, "solver/nan": math.nan,
                         "solver/flag": True, "train/kl": 0.01}),
           ("train", 2, {"solver/reward_mean": -0.125, "groups/count": 3}),
           ("eval", 2, {"phase": "after", "eval/all/with_skill_success_mean": 0.75})]


def _write_run(run, sinks):
    log = MetricsLog.in_run_dir(run, sinks)
    for kind, step, metrics in RECORDS:
        log.write(kind, step, metrics)
    log.close()
    return log


def test_scalar_values_keep_finite_numbers_only():
    assert scalar_values("train", RECORDS[1][2]) == {"train/solver/reward_mean": 0.5,
                                                     "train/groups/count": 4.0, "train/kl": 0.01}


def test_a_metric_under_its_kind_is_not_prefixed_twice():
    assert scalar_values("eval", RECORDS[0][2]) == {"eval/all/with_skill_success_mean": 0.25}
    assert scalar_values("train", {"train/kl": 0.5, "eval/x": 1}) == {"train/kl": 0.5,
                                                                      "train/eval/x": 1.0}


def test_event_files_equal_the_jsonl(tmp_path):
    run = tmp_path / "run"
    log = _write_run(run, open_sinks(run, tensorboard=True))
    events = EventAccumulator(str(run / TENSORBOARD_DIR))
    events.Reload()
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in log.read():
        metrics = {k: v for k, v in record.items() if k not in ("kind", "step", "time_s")}
        for tag, value in scalar_values(record["kind"], metrics).items():
            expected.setdefault(tag, []).append((record["step"], value))
    assert sorted(events.Tags()["scalars"]) == sorted(expected)
    assert "train/time_s" not in expected and len(expected) == 4
    for tag, points in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in points]
        assert all(math.isclose(a, b, rel_tol=1e-6)
                   for (_, a), (_, b) in zip(got, points, strict=True))


def test_no_event_files_when_off_or_missing(tmp_path, monkeypatch, caplog):
    assert open_sinks(tmp_path / "off", tensorboard=False) == []
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with caplog.at_level(logging.WARNING):
        assert open_sinks(tmp_path / "missing", tensorboard=True) == []
    assert "tensorboard" in caplog.text and not (tmp_path / "missing").exists()


class FakeWandbRun:
    def __init__(self, **options):
        self.options, self.logged, self.finished = options, [], False

    def log(self, values, step):
        self.logged.append((step, values))

    def finish(self):
        self.finished = True


def test_wandb_logs_when_installed_and_configured(tmp_path, monkeypatch):
    runs: list[FakeWandbRun] = []
    wandb = types.ModuleType("wandb")
    wandb.init = lambda **options: runs.append(FakeWandbRun(**options)) or runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    assert open_sinks(tmp_path / "run", tensorboard=False) == []  # installed, not configured
    monkeypatch.setenv("WANDB_PROJECT", "evolving-rl")
    _write_run(tmp_path / "run", open_sinks(tmp_path / "run", tensorboard=False))
    (run,) = runs
    assert run.options["project"] == "evolving-rl" and run.finished
    assert run.logged == [(step, scalar_values(kind, metrics)) for kind, step, metrics in RECORDS]


def test_a_fresh_run_archives_the_event_files(tmp_path):
    run = tmp_path / "run"
    archives = []
    for _generation in range(2):  # each archive keeps its own event files
        _write_run(run, open_sinks(run, tensorboard=True))
        archives.append(archive_previous_run(run))
        assert not (run / TENSORBOARD_DIR).exists()
    assert [len(list((a / TENSORBOARD_DIR).iterdir())) for a in archives] == [1, 1]
