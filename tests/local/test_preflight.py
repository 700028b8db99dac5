"""The main job's checks before it writes anything: a port clash or a missing path stops it with
the config key to change, and a finished run in the output folder is left byte-identical."""

from __future__ import annotations

import hashlib
import logging
import socket
from pathlib import Path

from env.launch import free_port, free_port_block
from evolving_rl.local.__main__ import main
from evolving_rl.local.preflight import port_problems

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
            "--set", f"run.output_dir={run}", "--set", f"alfworld.router_port={router}",
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
    assert f"alfworld.router_port: port {port} on 127.0.0.1 is in use" in message
    assert "--set alfworld.router_port=" in message and "nothing was written" in message


def test_missing_paths_are_named_by_their_keys(tmp_path, caplog):
    run = tmp_path / "run"
    with caplog.at_level(logging.ERROR):
        code = main(_args(run, free_port(), ("--set", f"local.resume_from={tmp_path}/nope",
                                             "--set", f"local.model={tmp_path}/no_model")))
    assert code == 2 and not run.exists()
    message = caplog.records[-1].getMessage()
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
