"""A full disk or a file-size limit mid-run ends the job with one line naming the file, and every
reader of `metrics.jsonl` drops a torn last line with a warning (issue 60, item 4)."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import evolving_rl.local.__main__ as job_command
from evolving_rl.evaluate.learning_report import read_local_run
from evolving_rl.local.checkpoints import write_folder
from evolving_rl.local.metrics import MetricsLog, RunWriteError, read_records

FULL = Path("/dev/full")  # every write to it fails with ENOSPC, as on a full disk


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_raises_one_error_naming_the_metrics_file():
    with pytest.raises(RunWriteError, match=f"could not write {FULL}: No space left on device"):
        MetricsLog(FULL).write("train", 1, {"loss": 0.5})


def test_a_failed_write_ends_the_job_with_one_line_and_exit_1(monkeypatch, caplog):
    def full(_cfg, finish=None):
        raise RunWriteError(Path("runs/x/metrics.jsonl"), OSError(errno.ENOSPC, "No space"))

    monkeypatch.setattr(job_command, "run_job", full)
    with caplog.at_level(logging.ERROR):
        assert job_command.main(["--config", "configs/local_cpu.yaml"]) == 1
    assert caplog.records[-1].getMessage().startswith(
        "could not write runs/x/metrics.jsonl: No space; the run stops here")


def test_a_file_size_limit_during_a_checkpoint_save_is_one_error_and_no_staging(tmp_path):
    code = ("import resource, sys; from pathlib import Path\n"
            "from evolving_rl.local.checkpoints import write_folder\n"
            "from evolving_rl.local.metrics import RunWriteError\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
            "try:\n"
            "    write_folder(Path(sys.argv[1]),\n"
            "                 lambda d: (d / 'w.bin').write_bytes(b'0' * 8192))\n"
            "except RunWriteError as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "step_0002")],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.startswith(f"could not write {tmp_path / 'step_0002'}: File too large")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_checkpoint_write_leaves_the_saved_folder_as_it_was(tmp_path):
    folder = write_folder(tmp_path / "step_0002", lambda d: (d / "w.bin").write_bytes(b"ok"))

    def full(staging: Path) -> None:
        (staging / "w.bin").write_bytes(b"")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RunWriteError):
        write_folder(folder, full)
    assert (folder / "w.bin").read_bytes() == b"ok"
    assert [p.name for p in tmp_path.iterdir()] == ["step_0002"]


def _torn_log(run_dir: Path) -> Path:
    log = MetricsLog.in_run_dir(run_dir)
    log.write("train", 1, {"solver/reward_mean": 0.5})
    log.write("eval", 1, {"phase": "after", "protocol": "reference"})
    with log.path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"kind": "train", "step": 2})[:17])  # the disk filled up here
    return log.path


def test_every_reader_drops_a_torn_last_line_with_a_warning(tmp_path, caplog):
    path = _torn_log(tmp_path / "run")
    with caplog.at_level(logging.WARNING):
        assert [r["step"] for r in read_records(path)] == [1, 1]
        run = read_local_run(tmp_path / "run", "local")
    assert list(run.steps) == [1] and "after" in run.evals
    assert f"{path}:3: unreadable line dropped" in caplog.text


def test_a_record_after_a_torn_line_starts_its_own_line(tmp_path, caplog):
    path = _torn_log(tmp_path / "run")
    MetricsLog(path).write("train", 2, {"solver/reward_mean": 0.7})
    with caplog.at_level(logging.WARNING):
        assert [r["step"] for r in read_records(path, "train")] == [1, 2]
    assert f"{path}:3: unreadable line dropped" in caplog.text
