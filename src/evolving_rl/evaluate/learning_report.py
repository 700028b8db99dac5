"""The learning comparison's report: slime launches per method beside local runs (issue 41 §2).

Owns `write_report(slime, local, out)`. A slime launch is read from what it certainly leaves
when launched with `--use-tensorboard`: slime's TensorBoard events in `RUN_DIR/tensorboard`
(scripts/lib/slime_launch.sh sets TENSORBOARD_DIR there), written by two processes, each scalar
at slime's step = the rollout id (slime/observability/logging_utils.py:44-51):
- our rollout logger's `rollout/*` (`slime_hooks.log_rollout`; the pipeline's metrics under
  `rollout/pipeline/`) and eval logger's `eval/<dataset>/*` (`slime_hooks.log_eval_rollout`);
- slime's `train/*` (KL term `train/kl_loss`, `train/grad_norm`;
  slime/backends/megatron_utils/model.py:880-899) and `perf/*` (`perf/train_time`,
  `perf/update_weights_time`; slime/observability/train_metric_utils.py:375-403). The weight
  push timed at step N is the one before rollout N (slime logs perf before its push).
An evaluation is "before" when it precedes the first train scalar (slime's eval before
training), "after" when it is the last one and follows the last train scalar.

A local run is its `metrics.jsonl` (`local.metrics`): `train` records of the pipeline's metrics
(the same keys as ours under `rollout/pipeline/`), `train/kl`, `train/grad_norm`,
`train/duration_s`, and `eval` records of phase before/after (reference protocol).

Written into `out`: `learning_curves.png` (per step: train success per role, groups with varied
rewards, KL, grad norm, seconds a step as rollout / train / weight push, each method's slime
launch solid beside its local runs dashed) and `learning_report.md` (held-out wins before and
after per backend, method and arm; Fisher's exact test, `core.stats`, of after against before
and of each arm after against the GRPO baseline's no-skill arm, local seeds pooled as the local
compare pools them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolving_rl.core.stats import Pooled, fisher_or_none, pool
from evolving_rl.local.metrics import FILE_NAME, read_records
from evolving_rl.local.plot_style import colour, plt, rate_axis, save, step_axis
from evolving_rl.pipeline.eval_report import arm_wins

ARMS = ("without_skill", "with_skill")
PHASES = ("before", "after")
BASELINE = ("grpo_baseline", "without_skill")
TB_DIR = "tensorboard"


@dataclass(frozen=True)
class Series:
    """One curve: its title, its key per (backend, method) and whether it is a rate."""

    title: str
    slime: Mapping[str, str]
    local: Mapping[str, str]
    rate: bool = True


NO_SKILL = {"evolving": "source/success_rate", "grpo_baseline": "solver/success_rate"}
SERIES = (
    Series("train success, no skill (source / baseline episodes)",
           {m: f"rollout/pipeline/{k}" for m, k in NO_SKILL.items()}, NO_SKILL),
    Series("train success, with skill (downstream episodes)",
           {"evolving": "rollout/pipeline/solver/success_rate"},
           {"evolving": "solver/success_rate"}),
    Series("extractor reward (mean)", {"evolving": "rollout/pipeline/extractor/reward_mean"},
           {"evolving": "extractor/reward_mean"}, rate=False),
    Series("solver groups with varied rewards", dict.fromkeys(NO_SKILL, "solver_varied_groups"),
           dict.fromkeys(NO_SKILL, "solver_varied_groups"), rate=False),
    Series("extractor groups with varied rewards", {"evolving": "extractor_varied_groups"},
           {"evolving": "extractor_varied_groups"}, rate=False),
    Series("KL to the reference", dict.fromkeys(NO_SKILL, "train/kl_loss"),
           dict.fromkeys(NO_SKILL, "train/kl"), rate=False),
    Series("grad norm", dict.fromkeys(NO_SKILL, "train/grad_norm"),
           dict.fromkeys(NO_SKILL, "train/grad_norm"), rate=False),
    Series("rollout seconds", dict.fromkeys(NO_SKILL, "rollout/time_s"),
           dict.fromkeys(NO_SKILL, "timing/wall_s"), rate=False),
    Series("train seconds", dict.fromkeys(NO_SKILL, "perf/train_time"),
           dict.fromkeys(NO_SKILL, "train/duration_s"), rate=False),
    Series("weight push seconds", dict.fromkeys(NO_SKILL, "perf/update_weights_time"), {},
           rate=False),
)


@dataclass
class RunCurves:
    """One run's training steps (1-based: after the step's update) -> metric -> value, and its
    held-out evaluation metrics per phase (`eval/<bucket>/<arm>_wins` ...)."""

    label: str
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    evals: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def series(self, key: str) -> dict[int, float]:
        return {s: m[key] for s, m in sorted(self.steps.items()) if key in m}

    def wins(self, phase: str, arm: str) -> Pooled | None:
        return arm_wins(self.evals.get(phase, {}), "all", arm)


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float
    wall_time: float


def read_scalars(tb_dir: Path) -> list[Scalar]:
    """Every scalar of every event file under `tb_dir`, in wall-time order (a stable sort: a
    file's own order where times tie)."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    out = []
    for path in sorted(tb_dir.rglob("events.out.tfevents.*")):
        for event in LegacyEventFileLoader(str(path)).Load():
            out += [Scalar(v.tag, int(event.step), float(v.simple_value), event.wall_time)
                    for v in event.summary.value if v.WhichOneof("value") == "simple_value"]
    return sorted(out, key=lambda s: s.wall_time)


def group_counts(metrics: Mapping[str, float], prefix: str) -> dict[str, float]:
    """Groups with varied rewards per role, from the pipeline's group counts under `prefix`."""
    return {f"{role}_varied_groups": metrics[f"{prefix}groups/{role}/count"]
            - metrics.get(f"{prefix}groups/{role}/zero_variance", 0.0)
            for role in ("solver", "extractor") if f"{prefix}groups/{role}/count" in metrics}


def _eval_phases(scalars: Sequence[Scalar], dataset: str | None) -> dict[str, dict[str, float]]:
    """The before/after evaluations' metrics (`eval/...` with the dataset name dropped), by
    position in the wall-time order (`read_scalars`): one evaluation's scalars are consecutive,
    a new one starts where a tag comes again."""
    train = [i for i, s in enumerate(scalars) if s.tag.startswith("train/")]
    evals: list[tuple[int, dict[str, float]]] = []
    for index, s in enumerate(scalars):
        parts = s.tag.split("/", 2)
        if parts[0] != "eval" or len(parts) < 3 or (dataset and parts[1] != dataset):
            continue
        key = f"eval/{parts[2]}"
        if not evals or key in evals[-1][1]:
            evals.append((index, {}))
        evals[-1][1][key] = s.value
    out = {}
    if evals and train and evals[0][0] < train[0]:
        out["before"] = evals[0][1]
    if evals and train and evals[-1][0] > train[-1]:
        out["after"] = evals[-1][1]
    return out


def read_slime_run(run_dir: Path, label: str, dataset: str | None = None) -> RunCurves:
    """A slime launch's curves and evaluations from its TensorBoard events (module doc)."""
    scalars = read_scalars(run_dir / TB_DIR)
    if not scalars:
        raise FileNotFoundError(f"no TensorBoard scalars under {run_dir / TB_DIR} (launch "
                                "with --use-tensorboard)")
    datasets = sorted({s.tag.split("/")[1] for s in scalars if s.tag.startswith("eval/")})
    if dataset is None and len(datasets) > 1:
        raise ValueError(f"{run_dir} evaluated {datasets}: name one (--dataset)")
    run = RunCurves(label)
    for s in scalars:
        if s.tag.split("/")[0] in ("rollout", "train", "perf"):
            run.steps.setdefault(s.step + 1, {})[s.tag] = s.value
    for metrics in run.steps.values():
        metrics.update(group_counts(metrics, "rollout/pipeline/"))
    run.evals = _eval_phases(scalars, dataset)
    return run


def read_local_run(run_dir: Path, label: str) -> RunCurves:
    """A local run's curves and reference-protocol evaluations from its metrics.jsonl."""
    records = read_records(run_dir / FILE_NAME)
    if not records:
        raise FileNotFoundError(f"no records in {run_dir / FILE_NAME}")
    run = RunCurves(label)
    for record in records:
        if record["kind"] == "train":
            run.steps[int(record["step"])] = {k: float(v) for k, v in record.items()
                                              if isinstance(v, int | float)}
        elif record["kind"] == "eval" and record.get("protocol", "reference") == "reference":
            run.evals.setdefault(record["phase"], record)
    return run


Runs = dict[tuple[str, str], list[RunCurves]]  # (backend, method) -> runs (local: seeds)


@dataclass(frozen=True)
class HeldOut:
    """Held-out wins of one backend, method and arm before and after training (pooled over its
    runs), after against before and against the same backend's GRPO-baseline no-skill arm."""

    backend: str
    method: str
    arm: str
    before: Pooled | None
    after: Pooled | None
    p_after_vs_before: float | None
    p_vs_baseline: float | None


def held_out_table(runs: Runs) -> list[HeldOut]:
    """One row per (backend, method, arm) with any held-out episode."""
    def pooled(backend: str, method: str, phase: str, arm: str) -> Pooled | None:
        return pool(run.wins(phase, arm) for run in runs.get((backend, method), []))

    rows = []
    for backend, method in runs:
        base = pooled(backend, BASELINE[0], "after", BASELINE[1])
        for arm in ARMS:
            before, after = (pooled(backend, method, phase, arm) for phase in PHASES)
            if before is None and after is None:
                continue
            versus = None if (method, arm) == BASELINE else fisher_or_none(after, base)
            rows.append(HeldOut(backend, method, arm, before, after,
                                fisher_or_none(after, before), versus))
    return rows


def _cell(wins: Pooled | None) -> str:
    return "–" if wins is None else f"{wins.wins}/{wins.episodes} ({100 * wins.rate:.1f}%)"


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def render_markdown(rows: Sequence[HeldOut], runs: Runs) -> str:
    lines = ["# Learning comparison: slime against the local backend", "",
             "Runs: " + "; ".join(f"{b} {m}: " + ", ".join(r.label for r in rs)
                                  for (b, m), rs in runs.items()), "",
             "![curves](learning_curves.png)", "",
             "## Held-out success (wins / episodes), Fisher's exact test, two-sided", "",
             "| backend | method | arm | before | after | p after vs before "
             "| p after vs baseline no skill |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.backend} | {r.method} | {r.arm.replace('_', ' ')} | {_cell(r.before)} | "
              f"{_cell(r.after)} | {_p(r.p_after_vs_before)} | {_p(r.p_vs_baseline)} |"
              for r in rows]
    lines += _missing_phases(runs)
    lines += ["", "## Per step", ""]
    for (backend, method), members in runs.items():
        for run in members:
            lines += _step_table(backend, method, run)
    return "\n".join(lines) + "\n"


def _missing_phases(runs: Runs) -> list[str]:
    """A line naming each run the pooled counts leave out of a phase (a launch stopped before its
    last evaluation has no `after`), so that pooling unequal sets of runs is not silent."""
    missing = [f"{backend} {method} {run.label} ({phase})" for (backend, method), members
               in runs.items() for run in members for phase in PHASES if phase not in run.evals]
    if not missing:
        return []
    return ["", "Runs without an evaluation of that phase, left out of its pooled counts "
            "(a launch stopped before its last evaluation has no after one): "
            + "; ".join(missing) + "."]


def _step_table(backend: str, method: str, run: RunCurves) -> list[str]:
    columns = [s for s in SERIES if method in (s.slime if backend == "slime" else s.local)]
    keys = [(s.slime if backend == "slime" else s.local)[method] for s in columns]
    out = [f"### {backend} {method}: {run.label}", "",
           "| step | " + " | ".join(s.title for s in columns) + " |",
           "|---|" + "---|" * len(columns)]
    for step, metrics in sorted(run.steps.items()):
        cells = [_value(metrics.get(key), s.rate) for s, key in zip(columns, keys, strict=True)]
        out.append(f"| {step} | " + " | ".join(cells) + " |")
    return out + [""]


def _value(value: float | None, rate: bool) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}%" if rate else f"{value:.4g}"


def plot_curves(runs: Runs, path: Path) -> Path:
    """One panel per series: each method's slime launch solid, its local runs dashed."""
    fig, axes = plt.subplots(4, 3, figsize=(15, 14))
    for ax, series in zip(axes.flat, SERIES, strict=False):
        for (backend, method), members in runs.items():
            key = (series.slime if backend == "slime" else series.local).get(method)
            for run in members if key else []:
                points = run.series(key)
                ax.plot(list(points), list(points.values()), color=colour(method),
                        linestyle="-" if backend == "slime" else "--", marker="o",
                        markerfacecolor="none", label=f"{backend} {method}")
        ax.set_title(series.title, fontsize=10)
        step_axis(ax)
        if series.rate:
            rate_axis(ax)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    _held_out_bars(axes.flat[len(SERIES)], runs)
    for ax in list(axes.flat)[len(SERIES) + 1:]:
        ax.axis("off")
    return save(fig, path, "slime (solid) beside the local backend (dashed)")


def _held_out_bars(ax: Any, runs: Runs) -> None:
    rows = [r for r in held_out_table(runs) if r.arm == "without_skill"]
    labels = [f"{r.backend}\n{r.method}" for r in rows]
    for offset, phase in ((-0.2, "before"), (0.2, "after")):
        values = [getattr(r, phase).rate if getattr(r, phase) else 0.0 for r in rows]
        ax.bar([i + offset for i in range(len(rows))], values, width=0.4, label=phase,
               alpha=0.5 if phase == "before" else 1.0, color=colour("without_skill"))
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_title("held-out success, no skill", fontsize=10)
    rate_axis(ax)
    ax.legend(fontsize=7)


def write_report(runs: Runs, out: Path) -> Path:
    """`learning_report.md` and `learning_curves.png` in `out`; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    plot_curves(runs, out / "learning_curves.png")
    path = out / "learning_report.md"
    path.write_text(render_markdown(held_out_table(runs), runs), encoding="utf-8")
    return path


def _pairs(items: Sequence[str], option: str) -> list[tuple[str, Path]]:
    out = []
    for item in items:
        method, sep, path = item.partition("=")
        if not sep or method not in NO_SKILL:
            raise SystemExit(f"{option} {item}: expected METHOD=DIR, METHOD one of "
                             f"{', '.join(NO_SKILL)}")
        out.append((method, Path(path)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.evaluate.learning_report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--slime", action="append", default=[], metavar="METHOD=RUN_DIR",
                        help="a slime launch's RUN_DIR (its tensorboard/ events)")
    parser.add_argument("--local", action="append", default=[], metavar="METHOD=RUN_DIR",
                        help="a local run's folder (its metrics.jsonl); repeat for seeds")
    parser.add_argument("--dataset", help="the eval dataset (EVAL_SPLITS) when a launch has "
                                          "several")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    runs: Runs = {}
    for method, path in _pairs(args.slime, "--slime"):
        runs.setdefault(("slime", method), []).append(read_slime_run(path, str(path),
                                                                     args.dataset))
    for method, path in _pairs(args.local, "--local"):
        runs.setdefault(("local", method), []).append(read_local_run(path, str(path)))
    if not runs:
        parser.error("give at least one --slime or --local run")
    print(write_report(runs, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
