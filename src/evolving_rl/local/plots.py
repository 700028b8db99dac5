"""The PNG plot of a local run, in the project's one style (`local.plot_style`).

Owns `plot_run`: three panels from the metrics log — mean reward per role per training step,
success per step (source episodes, downstream solver episodes) on a [0, 1] axis, and held-out
success before and after training (one pair of bars a protocol), with and without a skill,
each bar labelled with its value;
the subtitle says what the rewards subtract (the penalties), so a negative reward reads as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evolving_rl.local import plot_style as style

REWARD_SERIES = (("solver/reward_mean", "solver"), ("extractor/reward_mean", "extractor"))
SUCCESS_SERIES = (("source/success_rate", "source episodes"),
                  ("solver/success_rate", "downstream solver"))
EVAL_ARMS = (("eval/all/without_skill_success_mean", "without_skill"),
             ("eval/all/with_skill_success_mean", "with_skill"))


def _series(ax: Any, train: Sequence[Mapping[str, Any]],
            series: Sequence[tuple[str, str]], title: str) -> None:
    steps = [r["step"] for r in train]
    for index, (key, label) in enumerate(series):
        values = [r.get(key) for r in train]
        if any(v is not None for v in values):
            ax.plot(steps, [float("nan") if v is None else v for v in values], label=label,
                    color=style.colour(label), **style.line_style(index))
    ax.set_title(title)
    style.step_axis(ax, steps)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _eval_bars(ax: Any, evals: Sequence[Mapping[str, Any]]) -> None:
    labels = [r.get("phase", f"step {r['step']}")
              + ("" if r.get("protocol", "reference") == "reference" else f"\n{r['protocol']}")
              for r in evals]
    width = 0.38
    for offset, (key, arm) in enumerate(EVAL_ARMS):
        values = [r.get(key) for r in evals]
        errors = [r.get(key.replace("_mean", "_std")) or 0.0 for r in evals]
        bars = ax.bar([i + (offset - 0.5) * width for i in range(len(evals))],
                      [v or 0.0 for v in values], width, yerr=errors, capsize=3,
                      label=arm.replace("_", " "), color=style.colour(arm))
        style.label_bars(ax, bars, values)
    ax.set_xticks(range(len(evals)), labels)
    style.rate_axis(ax)
    cases = {int(r.get("eval/cases", 0)) for r in evals}
    ax.set_title("held-out success" + (f" ({cases.pop()} cases each)" if len(cases) == 1 else ""))
    style.bar_legend(ax)


def plot_run(records: Sequence[Mapping[str, Any]], out_path: str | Path,
             subtitle: str | None = None) -> Path:
    """Write the three-panel PNG of `records` (the metrics log) to `out_path`; `subtitle`: what
    the rewards subtract (`plot_style.reward_subtitle`)."""
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    fig, axes = style.plt.subplots(1, 3, figsize=(14, 4.4))
    _series(axes[0], train, REWARD_SERIES, "mean reward per role")
    axes[0].axhline(0.0, color="black", linewidth=0.6)
    _series(axes[1], train, SUCCESS_SERIES, "success rate")
    style.rate_axis(axes[1])
    _eval_bars(axes[2], evals)
    return style.save(fig, out_path, subtitle)
