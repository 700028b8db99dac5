"""The PNG plot of a local run (matplotlib, Agg backend: no display needed).

Owns `plot_run`: three panels from the metrics log — mean reward per role per training step,
success per step (source episodes, downstream solver episodes), and evaluation success before
and after training, with and without a skill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import MaxNLocator  # noqa: E402

REWARD_SERIES = (("solver/reward_mean", "solver"), ("extractor/reward_mean", "extractor"))
SUCCESS_SERIES = (("source/success_rate", "source episodes"),
                  ("solver/success_rate", "downstream solver"))
EVAL_ARMS = (("eval/all/without_skill_success_mean", "without skill"),
             ("eval/all/with_skill_success_mean", "with skill"))


def _series(ax: Any, train: Sequence[Mapping[str, Any]],
            series: Sequence[tuple[str, str]], title: str) -> None:
    steps = [r["step"] for r in train]
    for key, label in series:
        values = [r.get(key) for r in train]
        if any(v is not None for v in values):
            ax.plot(steps, [float("nan") if v is None else v for v in values], marker="o",
                    label=label)
    ax.set_title(title)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _eval_bars(ax: Any, evals: Sequence[Mapping[str, Any]]) -> None:
    labels = [r.get("phase", f"step {r['step']}") for r in evals]
    width = 0.38
    for offset, (key, arm) in enumerate(EVAL_ARMS):
        values = [r.get(key) or 0.0 for r in evals]
        errors = [r.get(key.replace("_mean", "_std")) or 0.0 for r in evals]
        ax.bar([i + (offset - 0.5) * width for i in range(len(evals))], values, width,
               yerr=errors, label=arm, capsize=3)
    ax.set_xticks(range(len(evals)), labels)
    ax.set_ylim(0, 1)
    ax.set_title("held-out success")
    ax.legend(fontsize=8)


def plot_run(records: Sequence[Mapping[str, Any]], out_path: str | Path) -> Path:
    """Write the three-panel PNG of `records` (the metrics log) to `out_path`."""
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    _series(axes[0], train, REWARD_SERIES, "mean reward per role")
    _series(axes[1], train, SUCCESS_SERIES, "success rate")
    _eval_bars(axes[2], evals)
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path
