"""The paper's experiment on one GPU (configs/local_gpu_paper.yaml): its split, the job's
per-protocol evaluations with the training / held-out task-type groups, and their aggregate."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from env.alfworld.prepare import SEEN_TYPES, TASK_TYPES
from env.launch import free_port, free_port_block
from evolving_rl.config import ConfigError, load_config, parse_config
from evolving_rl.config.schema import JobEvalProtocol
from evolving_rl.local.experiments.compare_protocols import protocol_table, render_protocol_table
from evolving_rl.local.metrics import MetricsLog
from evolving_rl.pipeline.evaluation import EvalProtocol

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "configs" / "local_gpu_paper.yaml"


def test_the_profile_follows_the_reference_split():
    cfg = load_config(PAPER)
    assert cfg.alfworld.generator_task_types == ()  # all six types are generated
    assert cfg.pipeline.retrieval_split == "train_seen"  # training: the four seen types
    assert cfg.local.eval_retrieval_split == "train"  # evaluation retrieves over all of train
    assert "reference" in cfg.local.eval_protocols_after
    assert cfg.local.n_eval_games % len(TASK_TYPES) == 0  # as many games of every type
    assert len(SEEN_TYPES) == 4 and set(SEEN_TYPES) < set(TASK_TYPES)


def test_job_protocols_are_the_evaluation_protocols_but_library():
    assert set(typing.get_args(JobEvalProtocol)) == {str(p) for p in EvalProtocol} - {"library"}


@pytest.mark.parametrize(("override", "key"), [
    ({"eval_protocols_after": []}, "local.eval_protocols_after"),
    ({"eval_protocols_before": ["reference", "reference"]}, "local.eval_protocols_before"),
    ({"eval_protocols_after": ["library"]}, "local.eval_protocols_after"),
])
def test_bad_job_protocols_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_config({"local": override})


def _log_after(run_dir: Path, protocol: str, counts: dict[str, dict[str, tuple[int, int]]]):
    """An after-training eval record: bucket -> arm -> (wins, scored episodes)."""
    values: dict = {"phase": "after", "protocol": protocol}
    for bucket, arms in counts.items():
        for arm, (wins, scored) in arms.items():
            values.update({f"eval/{bucket}/{arm}_wins": wins,
                           f"eval/{bucket}/{arm}_scored": scored})
    MetricsLog.in_run_dir(run_dir).write("eval", 8, values)


def test_protocol_table_pools_seeds_per_group_and_tests_both_ways(tmp_path):
    held = "group/held_out_types"
    records = {}
    for seed in (0, 1):
        for method, card in (("evolving", (30, 48)), ("grpo_baseline", (5, 48))):
            run = tmp_path / f"{method}{seed}"
            _log_after(run, "written_skill", {held: {"with_skill": card,
                                                     "without_skill": (6, 48)}})
            records[(method, seed)] = [json.loads(line) for line in
                                       (run / "metrics.jsonl").read_text().splitlines()]
    rows = {(r["method"], r["arm"]): r["groups"] for r in protocol_table(records)}
    mine = rows[("evolving", "with_skill")]["held-out types"]
    assert (mine["wins"], mine["episodes"]) == (60, 96)
    assert mine["p_vs_own_no_skill"] < 1e-6 and mine["p_vs_baseline_no_skill"] < 1e-6
    base_card = rows[("grpo_baseline", "with_skill")]["held-out types"]
    assert base_card["p_vs_own_no_skill"] > 0.5  # 10/96 vs 12/96
    base = rows[("grpo_baseline", "without_skill")]["held-out types"]
    assert base["p_vs_baseline_no_skill"] is None and base["p_vs_own_no_skill"] is None
    assert "all" not in rows[("evolving", "with_skill")]  # no such bucket recorded
    text = "\n".join(render_protocol_table(protocol_table(records)))
    assert "| evolving | written_skill | with skill | – | – | 60/96 (62.5%); vs own" in text


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~8 min on 2 shared cores: six types of games, SmolLM2 on the CPU
@pytest.mark.parametrize("switch", [{}, {"pipeline.skill_use": "teacher",
                                         "pipeline.extractor_reward": "teach"}],
                         ids=["context", "teacher"])
def test_the_paper_profile_runs_end_to_end_on_cpu(tmp_path, switch):
    """configs/local_gpu_paper.yaml at CPU size (SmolLM2, one game per type and split, one
    step): six types generated, training on train_seen, both after-training protocols recorded
    with the training / held-out groups; under the teacher switch, students scored and trained
    on (docs/design.md §4.6)."""
    port = free_port_block(5)
    overrides = {
        "local.model": "smollm2", "local.device": "cpu", "local.dtype": "float32",
        "local.max_batch_generate": 8, "retrieval.device": "cpu", "alfworld.n_workers": 2,
        "alfworld.data_root": tmp_path / "data", "alfworld.prepared_dir": tmp_path / "prepared",
        "alfworld.port": port, "alfworld.worker_base_port": port + 1,
        "alfworld.log_dir": tmp_path / "logs", "retrieval.log_dir": tmp_path / "logs",
        "retrieval.port": free_port(exclude=range(port, port + 5)),
        "retrieval.cache_path": tmp_path / "cache.npz", "run.output_dir": tmp_path / "run",
        "local.games_per_type": 1, "local.generator_workers": 2, "local.train_steps": 1,
        "local.n_eval_games": 6, "pipeline.max_steps": 2, "pipeline.source_tasks_per_rollout": 1,
        "pipeline.n_skills": 2, "pipeline.top_k": 1, "sampling.extractor.max_new_tokens": 16,
        "sampling.eval_extractor.max_new_tokens": 16, **switch}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    proc = subprocess.run([sys.executable, "-m", "evolving_rl.local", "--config", str(PAPER),
                           *sets], cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert [(r["kind"], r.get("protocol")) for r in records] == [
        ("train", None), ("eval", "reference"), ("eval", "written_skill")]
    if switch:  # one student per retrieved task, scored with both skills as written
        assert records[0]["teacher/students"] == 1 and records[0]["teacher/score_calls"] == 2
        assert records[0]["teacher/score_failures"] == 0
        assert records[0]["train/teacher_tokens"] > 0
    else:
        assert "teacher/students" not in records[0]
    for record in records[1:]:
        assert record["eval/cases"] == 6
        assert record["eval/group/held_out_types/cases"] == 2  # look_at_obj, pick_two
        assert record["eval/group/training_types/cases"] == 4
        assert "eval/group/held_out_types/with_skill_scored" in record
    summary = (run / "summary.txt").read_text()
    assert "before: not evaluated" in summary and "after  written_skill:" in summary
    assert "held out types:" in summary
