"""Methods x seeds of a local profile: the plan (ports, folders, overrides), the aggregate's
arithmetic on hand-made metrics logs, the report files, and (slow) two real runs side by side."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from env.launch import free_port_block
from evolving_rl.config import load_config
from evolving_rl.domains.alfworld import DOMAIN as ALFWORLD
from evolving_rl.domains.mind2web import DOMAIN as MIND2WEB
from evolving_rl.local.experiments.compare import PORT_BLOCK, _port_fields, plan_runs, port_stride
from evolving_rl.local.experiments.compare_report import (
    aggregate,
    render_markdown,
    train_panels,
    write_report,
)
from evolving_rl.local.metrics import MetricsLog

ROOT = Path(__file__).resolve().parents[2]
PANELS = train_panels(ALFWORLD.invalid_actions)


def _ports(run) -> set[int]:
    return {int(item.split("=")[1]) for item in run.overrides
            if item.split("=")[0].endswith("port")}


def test_every_run_gets_its_own_ports_folder_and_logs(tmp_path):
    cfg = load_config(ROOT / "configs" / "local_gpu.yaml")
    runs = plan_runs(cfg, ["evolving", "grpo_baseline"], [0, 1, 2], tmp_path)
    assert [(r.method, r.seed) for r in runs] == [
        ("evolving", 0), ("evolving", 1), ("evolving", 2),
        ("grpo_baseline", 0), ("grpo_baseline", 1), ("grpo_baseline", 2)]
    n_workers = cfg.alfworld.n_workers
    taken: set[int] = set()
    for run in runs:
        overrides = dict(item.split("=", 1) for item in run.overrides)
        assert overrides["pipeline.method"] == run.method
        assert overrides["run.seed"] == str(run.seed)
        assert Path(overrides["run.output_dir"]) == tmp_path / f"{run.method}_seed{run.seed}"
        assert overrides["alfworld.log_dir"].startswith(overrides["run.output_dir"])
        ports = _ports(run)
        base = int(overrides["alfworld.worker_base_port"])
        used = ports | set(range(base, base + n_workers))
        assert not used & taken, run
        taken |= used
        load_config(ROOT / "configs" / "local_gpu.yaml", list(run.overrides))  # still valid
    assert {key for key, _ in _port_fields(cfg)} >= {"alfworld.port", "retrieval.port"}


def _log(run_dir: Path, success: list[float], before: float, after: float) -> None:
    log = MetricsLog.in_run_dir(run_dir)
    log.write("eval", 0, {"phase": "before", "eval/all/without_skill_success_mean": before})
    for step, value in enumerate(success, start=1):
        log.write("train", step, {"solver/success_rate": value, "train/kl": 0.001 * step,
                                  "solver/episodes": 70.0 + step % 2 * 4})
    log.write("eval", len(success), {"phase": "after",
                                      "eval/all/without_skill_success_mean": after})


def test_aggregate_means_and_sample_stds_over_seeds(tmp_path):
    runs = []
    for seed, (curve, before, after) in enumerate([
            ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], 0.1, 0.3),
            ([0.1, 0.1, 0.1, 0.2, 0.2, 0.2], 0.1, 0.2)]):
        run_dir = tmp_path / f"grpo_baseline_seed{seed}"
        _log(run_dir, curve, before, after)
        runs.append(("grpo_baseline", seed, run_dir))
    runs.append(("grpo_baseline", 2, tmp_path / "missing"))  # a run that wrote nothing
    summary, records = aggregate(runs, PANELS)
    entry = summary["methods"]["grpo_baseline"]
    assert entry["finished"] == 2 and entry["seeds"] == [0, 1, 2]
    after = entry["held_out"]["after/without_skill"]
    assert after["n"] == 2 and after["mean"] == pytest.approx(0.25)
    assert after["std"] == pytest.approx(statistics.stdev([0.3, 0.2]))
    assert entry["held_out"]["after/with_skill"]["mean"] is None
    change = entry["train_change"]["train success, no skill"]
    assert change["per_seed"][0] == pytest.approx(0.4 - 0.1)  # last three minus first three
    assert change["per_seed"][1] == pytest.approx(0.1)
    assert change["per_seed"][2] is None
    assert change["mean"] == pytest.approx(0.2)
    assert "skill parse rate" not in entry["train_change"]  # the baseline extracts nothing
    assert entry["episodes_per_step"]["mean"] == pytest.approx(72.0)  # 70, 74, 70, ...
    assert "Solver episodes played a step" in render_markdown(summary, PANELS)
    table = render_markdown(summary, PANELS)
    assert "| grpo_baseline | 2/3 | 10.0 ± 0.0 | – | 25.0 ± 7.1 | – |" in table
    assert len(records[("grpo_baseline", 2)]) == 0


def test_write_report_files(tmp_path):
    _log(tmp_path / "a", [0.0] * 6, 0.0, 0.0)
    _log(tmp_path / "b", [0.5] * 6, 0.5, 0.5)
    path = write_report([("evolving", 0, tmp_path / "a"), ("grpo_baseline", 0, tmp_path / "b")],
                        tmp_path / "out", ALFWORLD.invalid_actions)
    assert path.read_text().startswith("## Held-out success")
    assert (tmp_path / "out" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert set(data["methods"]) == {"evolving", "grpo_baseline"}


def test_the_invalid_action_panel_reads_in_the_environments_words(tmp_path):
    _log(tmp_path / "a", [0.0] * 6, 0.0, 0.0)
    path = write_report([("grpo_baseline", 0, tmp_path / "a")], tmp_path / "out",
                        MIND2WEB.invalid_actions)
    data = json.loads((tmp_path / "out" / "comparison.json").read_text())
    title = "unreadable actions (no tag, empty or malformed), no skill"
    assert title in data["methods"]["grpo_baseline"]["train_change"]
    assert f"| grpo_baseline | {title} |" in path.read_text()
    assert "inadmissible" not in path.read_text()
    assert "inadmissible actions, no skill" in [panel.title for panel in PANELS]


def _log_wins(run_dir: Path, arms: dict[str, tuple[int, int]]) -> None:
    """An after-training evaluation with these (wins, scored episodes) per arm."""
    values: dict = {"phase": "after"}
    for arm, (wins, scored) in arms.items():
        values.update({f"eval/all/{arm}_wins": wins, f"eval/all/{arm}_scored": scored,
                       f"eval/all/{arm}_success_mean": wins / scored})
    MetricsLog.in_run_dir(run_dir).write("eval", 10, values)


def test_held_out_wins_are_pooled_and_tested_against_the_baseline(tmp_path):
    runs = []
    for seed, (with_skill, without) in enumerate([((20, 64), (9, 64)), ((18, 64), (7, 64))]):
        _log_wins(tmp_path / f"e{seed}", {"with_skill": with_skill, "without_skill": without})
        _log_wins(tmp_path / f"b{seed}", {"without_skill": (6 + seed, 64)})
        runs += [("evolving", seed, tmp_path / f"e{seed}"),
                 ("grpo_baseline", seed, tmp_path / f"b{seed}")]
    summary, _ = aggregate(runs, PANELS)
    rows = {(r["method"], r["arm"]): r for r in summary["pooled_after"]}
    mine = rows[("evolving", "with_skill")]
    assert (mine["wins"], mine["episodes"]) == (38, 128)
    assert rows[("grpo_baseline", "without_skill")]["wins"] == 13
    assert rows[("grpo_baseline", "without_skill")]["p_vs_baseline"] is None
    p = rows[("evolving", "with_skill")]["p_vs_baseline"]
    assert 0 < p < 0.001  # 38/128 vs 13/128
    assert rows[("evolving", "without_skill")]["p_vs_baseline"] > 0.3  # 16/128 vs 13/128
    assert "| evolving | with skill | 38 / 128 | 29.7 |" in render_markdown(summary, PANELS)


def test_main_refuses_an_unknown_method(tmp_path):
    out = subprocess.run([sys.executable, "-m", "evolving_rl.local.experiments.compare",
                          "--methods", "evolving,ppo", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 2 and "--methods takes some of" in out.stderr


@pytest.mark.slow
def test_two_real_runs_side_by_side(tmp_path):
    """The GPU profile shortened to CPU size: both methods, one seed, two children at once."""
    base = free_port_block(8)
    overrides = {
        "local.device": "cpu", "local.dtype": "float32", "local.torch_threads": 1,
        "local.max_batch_generate": 8, "local.prefix_cache_entries": 32,
        "local.gradient_checkpointing": True,
        "alfworld.data_root": tmp_path / "data", "alfworld.prepared_dir": tmp_path / "prep",
        "alfworld.n_workers": 1, "alfworld.port": base,
        "alfworld.worker_base_port": base + 1, "retrieval.port": base + 2,
        "retrieval.cache_path": tmp_path / "cache.npz", "retrieval.device": "cpu",
        "local.games_per_type": 1, "local.generator_workers": 1, "local.train_steps": 1,
        "local.n_eval_games": 1, "local.eval_repeats": 1, "pipeline.max_steps": 2,
        "pipeline.source_tasks_per_rollout": 1, "pipeline.n_skills": 2, "pipeline.top_k": 1,
        "sampling.extractor.max_new_tokens": 16, "sampling.eval_extractor.max_new_tokens": 16}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    out = tmp_path / "compare"
    done = subprocess.run(
        [sys.executable, "-m", "evolving_rl.local.experiments.compare", "--config",
         str(ROOT / "configs" / "local_gpu.yaml"), "--seeds", "0", "--parallel", "2",
         "--out", str(out), *sets], capture_output=True, text=True, cwd=ROOT, timeout=900,
        check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "comparison.json").read_text())
    for method in ("evolving", "grpo_baseline"):
        assert summary["methods"][method]["finished"] == 1
        recorded = load_config(out / f"{method}_seed0" / "config.yaml")
        assert recorded.pipeline.method == method
    assert not (out / "grpo_baseline_seed0" / "skill_library.jsonl").exists()
    assert (out / "curves.png").is_file()


def _disjoint(ports: tuple[int, ...], n_runs: int, stride: int) -> bool:
    blocks = [{p + i * stride + k for p in ports for k in range(PORT_BLOCK)}
              for i in range(n_runs)]
    return len(set().union(*blocks)) == sum(len(b) for b in blocks)


@pytest.mark.parametrize("ports,n_runs", [((8100, 8101, 8200, 8300), 6), ((8100, 8200), 5),
                                          ((40000, 40001, 8300), 3), ((9000,), 4)])
def test_port_stride_is_the_smallest_that_keeps_blocks_apart(ports, n_runs):
    stride = port_stride(list(ports), n_runs)
    assert stride % PORT_BLOCK == 0 and _disjoint(ports, n_runs, stride)
    assert stride == PORT_BLOCK or not _disjoint(ports, n_runs, stride - PORT_BLOCK)


def test_a_launch_archives_the_earlier_run_and_the_job_keeps_its_log(tmp_path, monkeypatch):
    from evolving_rl.local.experiments import compare
    from evolving_rl.local.job import archive_previous_run

    run_dir = tmp_path / "evolving_seed0"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("earlier\n")
    (run_dir / "job.log").write_text("earlier log\n")

    def child(cmd, stdout, **kwargs):  # the job: archives what it finds, then logs
        archive_previous_run(run_dir)
        stdout.write("this run\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(compare.subprocess, "run", child)
    assert compare.launch(compare.PlannedRun("evolving", 0, run_dir, ()), "c.yaml", []) == 0
    (archive,) = run_dir.glob("previous-*")
    assert (archive / "metrics.jsonl").read_text() == "earlier\n"
    assert (archive / "job.log").read_text() == "earlier log\n"
    assert (run_dir / "job.log").read_text() == "this run\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_run_that_cannot_start_stops_the_comparison_with_nothing_moved(tmp_path, monkeypatch,
                                                                         caplog):
    from evolving_rl.local.experiments import compare

    earlier = tmp_path / "evolving_seed0"
    earlier.mkdir()
    (earlier / "metrics.jsonl").write_text("earlier\n")

    def prepare(_cfg):
        raise AssertionError("the comparison went on past its preflight")

    monkeypatch.setattr(compare, "prepare_shared", prepare)
    code = compare.main(["--config", str(ROOT / "configs" / "local_cpu.yaml"), "--seeds", "0",
                         "--methods", "evolving", "--out", str(tmp_path),
                         "--set", "local.device=cuda"])
    assert code == 2 and [p.name for p in tmp_path.iterdir()] == ["evolving_seed0"]
    assert [p.name for p in earlier.iterdir()] == ["metrics.jsonl"]
    message = caplog.records[-1].getMessage()
    assert message.startswith("evolving seed 0: the run did not start")
    assert "local.device: 'cuda' but" in message


def test_a_run_evaluated_only_without_skills_is_reported(tmp_path):
    """`eval_protocols_after: [no_skill]` (as the teacher runs): its arm is the without-skill
    number, so the run counts as finished; a reference record, where present, comes first."""
    MetricsLog.in_run_dir(tmp_path / "t").write("eval", 8, {
        "phase": "after", "protocol": "no_skill", "eval/all/without_skill_wins": 3,
        "eval/all/without_skill_scored": 144, "eval/all/without_skill_success_mean": 3 / 144})
    MetricsLog.in_run_dir(tmp_path / "r").write("eval", 8, {
        "phase": "after", "protocol": "written_skill", "eval/all/without_skill_success_mean": 0.9})
    _log_wins(tmp_path / "r", {"without_skill": (6, 48)})  # reference: recorded no protocol
    summary, _ = aggregate([("evolving", 0, tmp_path / "t"), ("grpo_baseline", 0, tmp_path / "r")],
                           PANELS)
    assert summary["methods"]["evolving"]["finished"] == 1
    rows = {(r["method"], r["arm"]): r for r in summary["pooled_after"]}
    assert (rows[("evolving", "without_skill")]["wins"],
            rows[("evolving", "without_skill")]["episodes"]) == (3, 144)
    after = summary["methods"]["grpo_baseline"]["held_out"]["after/without_skill"]
    assert after["mean"] == pytest.approx(6 / 48)  # not the written_skill record's 0.9
