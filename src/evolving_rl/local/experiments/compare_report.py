"""The aggregate of several local runs (methods x seeds): curves, held-out table, JSON.

Owns `write_report(runs, out, invalid_actions)`: reads each run's `metrics.jsonl` and writes
into `out`
- `curves.png` — per training step, mean ± std over seeds per method: success of the episodes
  played without a skill (the full method's source episodes, the baseline's episodes), success
  with a skill (the full method's downstream episodes), the invalid-action fraction of the
  no-skill episodes (titled in the environment's words, `Domain.invalid_actions`), skill parse
  rate, share of skills cut at the token cap, the extractor's mean reward (its skills' mean
  downstream success, less penalties), KL; and held-out success before/after per method and arm;
- `comparison.md` / `comparison.json` — held-out success before and after training per method and
  arm, solver episodes played a step, and each training series' change from its first `WINDOW`
  steps to its last `WINDOW`, as mean ± sample std over seeds, with every seed's own numbers;
  and the held-out wins after training pooled over seeds per method and arm, each arm against
  the GRPO baseline's no-skill arm by a two-sided Fisher exact test (`core.stats`), then the
  same per evaluation protocol and task-type group (`compare_protocols`).
  The before/after table and the curves read the `reference` protocol's records.
Pure reading and arithmetic; the runs themselves are `local.experiments.compare`'s.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.patches import Patch

from evolving_rl.core.stats import Pooled, fisher_exact, pool
from evolving_rl.local.experiments.compare_protocols import protocol_table, render_protocol_table
from evolving_rl.local.metrics import FILE_NAME, read_records
from evolving_rl.local.plot_style import (
    colour,
    label_bars,
    line_style,
    plt,
    rate_axis,
    save,
    step_axis,
)
from evolving_rl.pipeline.eval_report import arm_wins

WINDOW = 3


@dataclass(frozen=True)
class Panel:
    """One training series: its title, its metric key per method (a method absent from `keys`
    has no such series) and whether it is a rate in [0, 1] (shown in percent)."""

    title: str
    keys: Mapping[str, str]
    rate: bool = True


Panels = tuple[Panel, ...]


def train_panels(invalid_actions: str) -> Panels:
    """The training series; `invalid_actions`: what the environment's invalid-action penalty
    counts (`Domain.invalid_actions`, e.g. "inadmissible actions" on ALFWorld)."""
    return (
        Panel("train success, no skill",
              {"evolving": "source/success_rate", "grpo_baseline": "solver/success_rate"}),
        Panel("train success, with skill (downstream)", {"evolving": "solver/success_rate"}),
        Panel(f"{invalid_actions}, no skill",
              {"evolving": "source/invalid_action_fraction",
               "grpo_baseline": "solver/invalid_action_fraction"}),
        Panel("skill parse rate", {"evolving": "extractor/parse_ok_rate"}),
        Panel("skills cut at the token cap", {"evolving": "extractor/truncated_rate"}),
        Panel("extractor reward (mean)", {"evolving": "extractor/reward_mean"}, rate=False),
        Panel("KL to the initial policy", {"evolving": "train/kl", "grpo_baseline": "train/kl"},
              rate=False),
    )

ARMS = ("without_skill", "with_skill")
PHASES = ("before", "after")
PHASE_LOOK = {"before": {"alpha": 0.45, "hatch": "//"}, "after": {}}  # colour: the arm's

Run = tuple[str, int, Path]


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None, int]:
    """Mean, sample std (0 for one value) and count of the finite values."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return None, None, 0
    std = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return statistics.fmean(finite), std, len(finite)


def series(records: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
    return {int(r["step"]): float(r[key]) for r in records
            if r.get("kind") == "train" and r.get(key) is not None}


#: Protocols whose records this report reads, in order of preference: the reference protocol
#: (runs that recorded no protocol ran only it), else `no_skill`, whose one arm is the reference
#: protocol's without-skill arm (the same games, no skill).
REPORTED_PROTOCOLS = ("reference", "no_skill")


def _eval_record(records: Sequence[Mapping[str, Any]], phase: str) -> Mapping[str, Any]:
    """The held-out evaluation record of `phase` ("before" / "after") under the first of
    REPORTED_PROTOCOLS the run evaluated; empty when absent."""
    evals = [r for r in records if r.get("kind") == "eval" and r.get("phase") == phase]
    for protocol in REPORTED_PROTOCOLS:
        found = next((r for r in evals if r.get("protocol", "reference") == protocol), None)
        if found is not None:
            return found
    return {}


def held_out(records: Sequence[Mapping[str, Any]], phase: str, arm: str) -> float | None:
    return _eval_record(records, phase).get(f"eval/all/{arm}_success_mean")


def held_out_wins(records: Sequence[Mapping[str, Any]], phase: str, arm: str) -> Pooled | None:
    """Wins and scored episodes of one held-out arm (None when that evaluation is absent)."""
    return arm_wins(_eval_record(records, phase), "all", arm)


BASELINE = ("grpo_baseline", "without_skill")


def pooled_tests(records: Records) -> list[dict[str, Any]]:
    """Held-out wins after training, pooled over seeds per (method, arm), each tested against
    the baseline's no-skill arm (two-sided Fisher exact; None where the baseline is absent)."""
    methods = dict.fromkeys(m for m, _ in records)
    wins = {(m, arm): pool([held_out_wins(recs, "after", arm)
                              for (mm, _), recs in records.items() if mm == m])
            for m in methods for arm in ARMS}
    base = wins.get(BASELINE)
    rows = []
    for (method, arm), found in wins.items():
        if found is None or found.episodes == 0:
            continue
        p = (fisher_exact(found, base) if base is not None and (method, arm) != BASELINE
             else None)
        rows.append({"method": method, "arm": arm, "wins": found.wins,
                     "episodes": found.episodes, "p_vs_baseline": p})
    return rows


def window_change(points: Mapping[int, float]) -> float | None:
    """Mean of the last `WINDOW` steps minus mean of the first `WINDOW` (None if too short)."""
    steps = sorted(points)
    if len(steps) < 2 * WINDOW:
        return None
    first = statistics.fmean(points[s] for s in steps[:WINDOW])
    return statistics.fmean(points[s] for s in steps[-WINDOW:]) - first


def _stat(values: Sequence[float | None]) -> dict[str, Any]:
    mean, std, n = mean_std(values)
    return {"mean": mean, "std": std, "n": n, "per_seed": list(values)}


Records = dict[tuple[str, int], list[dict[str, Any]]]
#: Solver episodes a step: the full method's source and downstream ones, the baseline's.
EPISODE_KEYS = ("source/episodes", "solver/episodes")


def episodes_per_step(records: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean over training steps of the solver episodes played (None without steps)."""
    counts = [sum(float(r.get(key) or 0.0) for key in EPISODE_KEYS)
              for r in records if r.get("kind") == "train"]
    return statistics.fmean(counts) if counts else None


def aggregate(runs: Sequence[Run], panels: Panels) -> tuple[dict[str, Any], Records]:
    """Per method: held-out success per phase and arm, training-series changes, over seeds; and
    every run's records by (method, seed)."""
    records = {(method, seed): read_records(run_dir / FILE_NAME) for method, seed, run_dir in runs}
    out: dict[str, Any] = {"window": WINDOW, "methods": {}}
    for method in dict.fromkeys(method for method, _, _ in runs):
        mine = [recs for (m, _), recs in records.items() if m == method]
        entry: dict[str, Any] = {
            "seeds": [seed for m, seed, _ in runs if m == method],
            "finished": sum(1 for recs in mine if held_out(recs, "after", ARMS[0]) is not None),
            "held_out": {f"{phase}/{arm}": _stat([held_out(recs, phase, arm) for recs in mine])
                         for phase in PHASES for arm in ARMS},
            "episodes_per_step": _stat([episodes_per_step(recs) for recs in mine]),
            "train_change": {}}
        for panel in panels:
            if method in panel.keys:
                entry["train_change"][panel.title] = _stat(
                    [window_change(series(recs, panel.keys[method])) for recs in mine])
        out["methods"][method] = entry
    out["pooled_after"] = pooled_tests(records)
    out["by_protocol_after"] = protocol_table(records)
    return out, records


def _fmt(stat: Mapping[str, Any], percent: bool = True, digits: int = 4) -> str:
    """`mean ± std` of a stat: a rate in percent (1 decimal), else with `digits` decimals."""
    if stat["mean"] is None:
        return "–"
    if percent:
        text = f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}"
    else:
        text = f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"
    return text + ("" if stat["n"] > 1 else " (1 seed)")


def render_markdown(summary: Mapping[str, Any], panels: Panels) -> str:
    lines = ["## Held-out success (%), mean ± std over seeds", "",
             "| method | seeds finished | " + " | ".join(
                 f"{phase}, {arm.replace('_', ' ')}" for phase in PHASES for arm in ARMS) + " |",
             "|---|---|" + "---|" * (len(PHASES) * len(ARMS))]
    for method, entry in summary["methods"].items():
        cells = [_fmt(entry["held_out"][f"{p}/{a}"]) for p in PHASES for a in ARMS]
        lines.append(f"| {method} | {entry['finished']}/{len(entry['seeds'])} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Solver episodes played a step (under `pipeline.unusable_skills: skip` the full "
              "method plays downstream episodes only for usable skills): " + "; ".join(
                  f"{method} {_fmt(entry['episodes_per_step'], percent=False, digits=1)}"
                  for method, entry in summary["methods"].items())]
    lines += _pooled_markdown(summary.get("pooled_after", []))
    lines += render_protocol_table(summary.get("by_protocol_after", []))
    lines += ["", f"## Training series: mean of the last {summary['window']} steps minus the "
              f"first {summary['window']} (percentage points; KL as is)", "",
              "| method | series | change | per seed |", "|---|---|---|---|"]
    rates = {panel.title: panel.rate for panel in panels}
    for method, entry in summary["methods"].items():
        for title, stat in entry["train_change"].items():
            percent = rates[title]
            per_seed = ", ".join("–" if v is None else f"{(100 if percent else 1) * v:+.3g}"
                                 for v in stat["per_seed"])
            lines.append(f"| {method} | {title} | {_fmt(stat, percent)} | {per_seed} |")
    return "\n".join(lines) + "\n"


def _pooled_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Held-out wins after training, pooled over seeds", "",
             "| method | arm | wins / episodes | success (%) | two-sided Fisher p vs GRPO "
             "baseline, no skill |", "|---|---|---|---|---|"]
    for row in rows:
        p = "–" if row["p_vs_baseline"] is None else f"{row['p_vs_baseline']:.3g}"
        lines.append(f"| {row['method']} | {row['arm'].replace('_', ' ')} | {row['wins']} / "
                     f"{row['episodes']} | {100 * row['wins'] / row['episodes']:.1f} | {p} |")
    return lines


def _band(ax: Any, per_seed: Sequence[Mapping[int, float]], label: str, rate: bool,
          index: int) -> None:
    """Mean over seeds with a ± std band (a rate's band kept inside [0, 1])."""
    steps = sorted({s for points in per_seed for s in points})
    if not steps:
        return
    stats = [mean_std([points.get(s) for points in per_seed]) for s in steps]
    mean = [m for m, _, _ in stats]
    low = [m - sd for m, sd, _ in stats]
    high = [m + sd for m, sd, _ in stats]
    if rate:
        low, high = [max(0.0, v) for v in low], [min(1.0, v) for v in high]
    line, = ax.plot(steps, mean, label=label, color=colour(label), **line_style(index))
    ax.fill_between(steps, low, high, alpha=0.2, color=line.get_color())


def _held_out_bars(ax: Any, summary: Mapping[str, Any]) -> None:
    """Before and after training per method and arm: the arm's colour, before hatched and light."""
    bars = [(method, arm, entry["held_out"]) for method, entry in summary["methods"].items()
            for arm in ARMS if any(entry["held_out"][f"{p}/{arm}"]["n"] for p in PHASES)]
    width = 0.38
    for offset, phase in enumerate(PHASES):
        stats = [held[f"{phase}/{arm}"] for _, arm, held in bars]
        means = [s["mean"] if s["n"] else None for s in stats]  # unmeasured: n/a
        drawn = ax.bar([i + (offset - 0.5) * width for i in range(len(bars))],
                       [m or 0.0 for m in means], width, yerr=[s["std"] or 0.0 for s in stats],
                       capsize=3, color=[colour(arm) for _, arm, _ in bars],
                       **PHASE_LOOK[phase])
        label_bars(ax, drawn, means)
    ax.set_xticks(range(len(bars)), [f"{method}\n{arm.replace('_', ' ')}"
                                     for method, arm, _ in bars], fontsize=7)
    rate_axis(ax)
    ax.set_title("held-out success (mean ± std over seeds)")
    ax.legend(handles=[Patch(facecolor="#999999", edgecolor="black", label=phase,
                             **PHASE_LOOK[phase]) for phase in PHASES],
              fontsize=8, ncols=2, loc="upper center")


def plot_curves(summary: Mapping[str, Any], records: Records, panels: Panels,
                out_path: Path) -> Path:
    rows = math.ceil((len(panels) + 1) / 3)
    fig, axes = plt.subplots(rows, 3, figsize=(15, 4 * rows))
    for ax, panel in zip(axes.flat, panels, strict=False):
        for index, (method, key) in enumerate(panel.keys.items()):
            per_seed = [series(recs, key) for (m, _), recs in records.items() if m == method]
            _band(ax, per_seed, method, panel.rate, index)
        ax.set_title(panel.title)
        step_axis(ax)
        if panel.rate:
            rate_axis(ax)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    _held_out_bars(axes.flat[len(panels)], summary)
    for ax in axes.flat[len(panels) + 1:]:
        ax.axis("off")
    return save(fig, out_path)


def write_report(runs: Sequence[Run], out: Path, invalid_actions: str) -> Path:
    """`comparison.md`, `comparison.json` and `curves.png` in `out`; returns the Markdown path.
    `invalid_actions`: the environment's `Domain.invalid_actions` (a panel's title)."""
    out.mkdir(parents=True, exist_ok=True)
    panels = train_panels(invalid_actions)
    summary, records = aggregate(runs, panels)
    (out / "comparison.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    plot_curves(summary, records, panels, out / "curves.png")
    path = out / "comparison.md"
    path.write_text(render_markdown(summary, panels), encoding="utf-8")
    return path
