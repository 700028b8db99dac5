"""The main job's checks before it writes anything: a port clash, a device torch cannot use, a
missing model or path, or too little disk for the checkpoints stops it with the config key to
change, and a finished run in the output folder is left byte-identical."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import evolving_rl.local.job as job
from env.launch import free_port, free_port_block
from evolving_rl.config import ConfigError, load_config
from evolving_rl.config.schema import LocalConfig
from evolving_rl.local.__main__ import main
from evolving_rl.local.model import QWEN_CODER_MODEL
from evolving_rl.local.preflight import (
    checkpoint_bytes,
    device_problem,
    disk_problems,
    model_problems,
    path_problems,
    port_problems,
)
from evolving_rl.local.run_lock import hold, holder

ROOT = Path(__file__).resolve().parents[2]


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): (hashlib.sha256(path.read_bytes()).hexdigest()
                                            if path.is_file() else "dir")
            for path in sorted(folder.rglob("*"))}


def _finished_run(run: Path) -> None:
    (run / "tensorboard").mkdir(parents=True)
    (run / "tensorboard" / "events.out.tfevents.1").write_bytes(b"\x00events")
    (run / "checkpoints" / "step_0003").mkdir(parents=True)
    (run / "checkpoints" / "step_0003" / "config.json").write_text("{}")
    for name in ("config.yaml", "metrics.jsonl", "skill_library.jsonl", "summary.txt"):
        (run / name).write_text(f"{name} of the finished run\n")


def _args(run: Path, router: int, extra: tuple[str, ...] = ()) -> list[str]:
    base = free_port_block(3, exclude={router})
    return ["--config", str(ROOT / "configs/local_cpu.yaml"),
            "--set", f"run.output_dir={run}", "--set", f"alfworld.port={router}",
            "--set", f"alfworld.worker_base_port={base}",
            "--set", f"retrieval.port={free_port(exclude={router, base, base + 1})}", *extra]


def test_a_port_clash_leaves_a_finished_run_byte_identical(tmp_path, caplog):
    run = tmp_path / "runs" / "local_cpu"
    _finished_run(run)
    before = _snapshot(run)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR):
            for _attempt in range(2):  # a second attempt costs nothing either
                assert main(_args(run, port)) == 2
    assert _snapshot(run) == before
    message = caplog.records[-1].getMessage()
    assert f"alfworld.port: port {port} on 127.0.0.1 is in use" in message
    assert "--set alfworld.port=" in message and "nothing was written" in message


def _refused(tmp_path: Path, caplog: pytest.LogCaptureFixture, *sets: str) -> str:
    """The error of a job refused with `--set` each of `sets`, having written nothing."""
    run = tmp_path / "run"
    with caplog.at_level(logging.ERROR):
        code = main(_args(run, free_port(), tuple(f"--set={item}" for item in sets)))
    assert code == 2 and not run.exists()
    return caplog.records[-1].getMessage()


def test_missing_paths_are_named_by_their_keys(tmp_path, caplog):
    message = _refused(tmp_path, caplog, f"local.resume_from={tmp_path}/nope",
                       f"local.model={tmp_path}/no_model")
    assert "local.resume_from: no checkpoint" in message and "local.model:" in message


def test_a_taken_worker_port_names_the_base_key_and_a_free_block():
    base = free_port_block(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        (found,) = port_problems({"alfworld.worker_base_port": ("127.0.0.1", base, 2),
                                  "retrieval.port": ("127.0.0.1", free_port(), 1)})
    assert found.startswith(f"alfworld.worker_base_port: port {base + 1} on 127.0.0.1 is in use")
    spare = int(found.rsplit("=", 1)[1])
    assert spare not in (base, base + 1)


class PastPreflight(Exception):
    """The job went on after its preflight."""


@pytest.fixture
def stop_after_preflight(monkeypatch):
    """A job that passes its preflight stops at its first step after archiving, not later."""
    def refuse(_seed: int) -> None:
        raise PastPreflight
    monkeypatch.setattr(job, "seed_everything", refuse)


UNUSABLE_DEVICES = [
    pytest.param(("local.device=cuda", "local.dtype=bfloat16", "retrieval.device=cuda:1"),
                 ("local.device: 'cuda' but ",  # no CUDA in this torch, or no GPU visible
                  "--set local.device=cpu", "--set retrieval.device=cpu"),
                 marks=pytest.mark.skipif(torch.cuda.is_available(),
                                          reason="needs a machine without CUDA"), id="cuda"),
    pytest.param(("local.device=mps", "retrieval.device=meta"),
                 ("local.device: 'mps' but no MPS device is visible", "--set local.device=cpu",
                  "retrieval.device: 'meta': device type 'meta' is not one the job runs on",
                  "--set retrieval.device=cpu"),
                 marks=pytest.mark.skipif(torch.backends.mps.is_available(),
                                          reason="needs a machine without MPS"), id="mps-meta"),
]


@pytest.mark.parametrize(("overrides", "expected"), UNUSABLE_DEVICES)
def test_a_device_this_machine_lacks_leaves_a_finished_run_byte_identical(
        tmp_path, caplog, stop_after_preflight, overrides, expected):
    run = tmp_path / "runs" / "local_cpu"
    _finished_run(run)
    before = _snapshot(run)
    sets = tuple(arg for override in overrides for arg in ("--set", override))
    with caplog.at_level(logging.ERROR):
        code = main(_args(run, free_port(), sets))
    assert code == 2 and _snapshot(run) == before
    message = caplog.records[-1].getMessage()
    for part in expected:
        assert part in message


def test_a_missing_cuda_index_names_a_visible_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert device_problem("local.device", "cuda:0") is None
    assert device_problem("retrieval.device", "cuda:1") == (
        "retrieval.device: 'cuda:1' but only 1 CUDA device(s) are visible; "
        "--set retrieval.device=cuda:0")
    assert device_problem("local.device", "gpu").startswith("local.device: 'gpu' is not a torch")


def test_every_accelerator_is_checked_and_other_types_are_refused(monkeypatch):
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert device_problem("local.device", "xpu") == (
        f"local.device: 'xpu' but no XPU device is visible (torch {torch.__version__}); "
        "--set local.device=cpu")
    monkeypatch.setattr(torch.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "device_count", lambda: 1)
    assert device_problem("local.device", "mps") is None
    assert device_problem("local.device", "mps:1", option="--device ") == (
        "local.device: 'mps:1' but only 1 MPS device(s) are visible; --device mps:0")
    for other in ("hpu", "xla:0", "privateuseone"):
        problem = device_problem("local.device", other)
        assert problem is not None and problem.endswith("--set local.device=cpu"), other
    assert device_problem("local.device", "cpu") is None


def test_a_missing_gguf_is_named_with_its_fetch_hint(tmp_path, caplog, stop_after_preflight):
    message = _refused(tmp_path, caplog, f"local.model={QWEN_CODER_MODEL.name}",
                       f"local.models_dir={tmp_path}")
    assert f"local.model: {QWEN_CODER_MODEL.name!r} is not converted yet" in message
    assert "get_qwen2.5_coder.sh --size 0.5b" in message


def _config(*overrides: str):
    return load_config(ROOT / "configs/local_cpu.yaml", overrides)


def test_a_converted_gguf_model_needs_no_gguf_and_a_missing_encoder_is_named(tmp_path):
    (tmp_path / QWEN_CODER_MODEL.folder).mkdir()
    (tmp_path / QWEN_CODER_MODEL.folder / "config.json").write_text("{}")
    cfg = _config(f"local.model={QWEN_CODER_MODEL.name}", f"local.models_dir={tmp_path}",
                  f"retrieval.model={tmp_path}/no_encoder")
    (found,) = model_problems(cfg)
    assert found.startswith("retrieval.model: embedding model folder not found")


def _model_folder(folder: Path, shapes: dict[str, list[int]]) -> None:
    """An HF folder whose safetensors header declares `shapes` (float32; no tensor data)."""
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    header = json.dumps({name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
                         for name, shape in shapes.items()}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)


def test_too_little_disk_for_the_checkpoints_is_named_with_the_estimate(tmp_path, monkeypatch):
    _model_folder(tmp_path / "model", {"embed": [1000, 100], "norm": [100]})
    free = {"bytes": 0}
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda _path: SimpleNamespace(free=free["bytes"]))
    cfg = _config(f"local.model={tmp_path / 'model'}", f"run.output_dir={tmp_path}/run/a",
                  "local.dtype=float32", "local.checkpoint_every=2", "local.train_steps=3")
    (found,) = disk_problems(cfg)
    # 100,100 float32 parameters: weights 0.40 MB + AdamW moments 0.80 MB, at steps 2 and 3
    assert found.startswith("run.output_dir: 2 checkpoint(s) of 100,100 parameters need about "
                            "2.40 MB (weights 0.40 MB + trainer state 0.80 MB each) but "
                            f"{tmp_path} has 0.00 MB free")
    assert "--set local.save_trainer_state=false" in found
    free["bytes"] = 2 * 3 * 4 * 100_100
    assert disk_problems(cfg) == []


def test_the_trainer_state_estimate_follows_the_masters():
    params = 10
    assert checkpoint_bytes(params, LocalConfig(dtype="float32")) == (40, 80)
    assert checkpoint_bytes(params, LocalConfig(dtype="bfloat16")) == (20, 120)
    assert checkpoint_bytes(params, LocalConfig(dtype="bfloat16", master_weights=False)) == (
        20, 40)
    assert checkpoint_bytes(params, LocalConfig(dtype="float32", optimizer_device="cpu")) == (
        40, 120)
    assert checkpoint_bytes(params, LocalConfig(save_trainer_state=False)) == (40, 0)


def test_a_second_job_on_a_running_jobs_folder_exits_2_naming_it_with_nothing_moved(
        tmp_path, caplog, stop_after_preflight):
    run = tmp_path / "runs" / "local_cpu"
    _finished_run(run)
    with hold(run):  # the running job (other ports than the second one's)
        before = _snapshot(run)
        with caplog.at_level(logging.ERROR):
            assert main(_args(run, free_port())) == 2
        assert _snapshot(run) == before
    message = caplog.records[-1].getMessage()
    assert f"run.output_dir: {run} is in use by a running job (pid {os.getpid()} on " in message
    assert "--set run.output_dir=<another folder>" in message


def test_the_lock_refuses_a_second_holder_and_dies_with_its_process(tmp_path):
    run = tmp_path / "run"
    with hold(run), pytest.raises(ConfigError, match=f"{run} is in use by a running job"):
        with hold(run):
            pass
    code = ("import sys; from pathlib import Path; from evolving_rl.local.run_lock import hold\n"
            "with hold(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, str(run)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "held\n"
        assert f"pid {child.pid} on " in str(holder(run))
    finally:
        child.kill()  # kill -9: the kernel drops the lock with the process
        child.wait()
    assert holder(run) is None
    with hold(run):
        pass


def test_a_file_size_limit_below_a_checkpoint_file_is_named(tmp_path, monkeypatch):
    _model_folder(tmp_path / "model", {"embed": [1000, 100], "norm": [100]})
    cfg = _config(f"local.model={tmp_path / 'model'}", f"run.output_dir={tmp_path}/run",
                  "local.dtype=float32")
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (500_000, resource.RLIM_INFINITY))
    (found,) = disk_problems(cfg)  # weights 0.40 MB fit, the trainer state's 0.80 MB do not
    assert found == ("run.output_dir: a checkpoint writes a file of about 0.80 MB but the "
                     "file-size limit (ulimit -f) is 0.50 MB: the run would lose its steps at "
                     "the save; raise it (ulimit -f unlimited), or --set "
                     "local.save_trainer_state=false")


def test_an_output_folder_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    cfg = _config(f"run.output_dir={tmp_path}/runs/a")
    monkeypatch.setattr(os, "access", lambda path, _mode: Path(path) != tmp_path)
    assert path_problems(cfg) == [f"run.output_dir: {tmp_path} is not writable (read-only, or "
                                  "not yours); --set run.output_dir=<a folder you can write>"]
