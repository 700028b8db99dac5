"""Determinism on the CPU (issue 61 §4, docs/reference.md "Determinism"): the main job of the
learning canary's profile (configs/probe_stated_cpu.yaml: plain GRPO on the stated probe, the
random 2-layer character model), run twice in this process for two training steps with one seed,
writes the same metrics, step for step, but the clock readings.

Each run is `local.job.run_job` itself (data, model, the probe's env server over HTTP, rollouts,
GRPO steps, the evaluations before and after, checkpoint). The retrieval server and its cache
are left out: plain GRPO and the `no_skill` evaluation never query them, and starting MiniLM
twice would cost most of a minute.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from env.launch import free_port
from evolving_rl.config import Config, load_config
from evolving_rl.local import job
from evolving_rl.local.servers import env_services

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "probe_stated_cpu.yaml"


def _config(folder: Path, run: str) -> Config:
    port = free_port()
    overrides = {"probe.port": port, "retrieval.port": free_port(exclude=[port]),
                 "probe.prepared_dir": folder / "prepared", "probe.log_dir": folder / "logs",
                 "retrieval.cache_path": folder / "cache.npz", "retrieval.log_dir": folder / "logs",
                 "local.models_dir": folder / "models", "run.output_dir": folder / run,
                 "local.train_steps": 2, "local.n_eval_games": 8}
    return load_config(PROFILE, [f"{key}={value}" for key, value in overrides.items()])


@contextlib.contextmanager
def _env_server_only(cfg: Config) -> Iterator[None]:
    """`local.servers.servers` without the retrieval server (see the module docstring)."""
    with env_services(cfg).serve(cfg):
        yield


def _clock_reading(key: str) -> bool:
    """Seconds, rates and shares of time: what a second run may not repeat."""
    return key.endswith("_s") or (key.startswith("timing/") and not key.endswith("_calls"))


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [{key: value for key, value in json.loads(line).items() if not _clock_reading(key)}
            for line in lines]


def test_one_seed_gives_the_same_two_steps_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(job, "servers", _env_server_only)
    monkeypatch.setattr(job, "build_retrieval_cache", lambda cfg, prepared: None)
    threads = torch.get_num_threads()
    try:
        first, second = (_records(job.run_job(_config(tmp_path, run)).run_dir)
                         for run in ("first", "second"))
    finally:
        torch.set_num_threads(threads)  # the job sets its own (`local.torch_threads`)
    assert [r["kind"] for r in first] == ["eval", "train", "train", "eval"]
    assert first[1]["train/n_tokens"] > 0 and first[1]["train/grad_norm"] > 0
    assert first[2]["train/loss"] != first[1]["train/loss"]  # the weights moved between steps
    for step, (a, b) in enumerate(zip(first, second, strict=True)):
        assert a == b, f"record {step} differs: " + ", ".join(
            f"{key} {a.get(key)} vs {b.get(key)}" for key in sorted(set(a) | set(b))
            if a.get(key) != b.get(key))
