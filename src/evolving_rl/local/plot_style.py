"""One plotting style for every figure the project writes (the local run's `rewards.png`, the
compare report's `curves.png`, the evaluation's chart per split).

Owns the colours (one per evaluation arm, training role and method, the same in every figure),
the markers that keep overlapping lines visible, rate axes clamped to [0, 1] and shown in
percent, value labels on bars (0% is written out, so zero never looks like missing data; an
unmeasured bar says "n/a"), the subtitle that names the reward penalties, and how a figure is
saved (matplotlib's Agg backend: no display needed; no timestamp in the PNG).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import MaxNLocator, PercentFormatter  # noqa: E402

from evolving_rl.core.rewards import RewardSettings  # noqa: E402

# One colour per thing plotted, whatever the figure (colour-blind safe Okabe-Ito hues).
COLOURS = {
    "without_skill": "#999999", "with_skill": "#0072b2",
    "solver": "#d55e00", "extractor": "#009e73",
    "source episodes": "#e69f00", "downstream solver": "#0072b2",
    "evolving": "#0072b2", "grpo_baseline": "#d55e00",
}
# Lines drawn over each other stay distinguishable by marker and dash.
MARKERS = ("o", "s", "^", "D")
DASHES = ("-", "--", ":", "-.")


def colour(name: str) -> str | None:
    """The fixed colour of `name` (an arm, role, series or method); None: matplotlib's."""
    return COLOURS.get(name)


def line_style(index: int) -> dict[str, Any]:
    """Marker and dash of the `index`-th line of a panel (hollow markers show what is below)."""
    return {"marker": MARKERS[index % len(MARKERS)], "linestyle": DASHES[index % len(DASHES)],
            "markerfacecolor": "none", "markersize": 9 - 4 * (index % 2)}  # nested, not hidden


def rate_axis(ax: Any, percent_values: bool = False) -> None:
    """A rate's y-axis: [0, 1] (or [0, 100] for values already in percent), ticks in percent."""
    top = 100.0 if percent_values else 1.0
    ax.set_ylim(-0.04 * top, top * 1.25)  # markers at 0 stay whole; labels, legend fit on top
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=top, decimals=0))
    ax.set_yticks([top * f for f in (0, 0.25, 0.5, 0.75, 1.0)])


def step_axis(ax: Any, steps: Sequence[int] = ()) -> None:
    """An x-axis of whole training steps, half a step of room either side (one step included)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if steps:
        ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
    ax.set_xlabel("training step")
    ax.margins(y=0.1)
    ax.grid(alpha=0.3)


def label_bars(ax: Any, bars: Any, values: Sequence[float | None],
               percent_values: bool = False) -> None:
    """Write each bar's value above it: "0%" for zero, "n/a" for an unmeasured bar."""
    scale = 1.0 if percent_values else 100.0
    labels = ["n/a" if v is None or math.isnan(v) else f"{scale * v:.0f}%" for v in values]
    ax.bar_label(bars, labels=labels, padding=2, fontsize=7)


def bar_legend(ax: Any) -> None:
    """The legend of a bar chart, in one row in the headroom above 100% (`rate_axis`)."""
    ax.legend(fontsize=8, ncols=2, loc="upper center")


def reward_subtitle(rewards: RewardSettings, invalid_actions: str) -> str:
    """What the rewards hold besides success, so that a negative reward reads as a penalty;
    `invalid_actions`: what the environment's invalid-action penalty counts (`Domain`)."""
    solver = ("solver reward = success" + (f" − {rewards.invalid_action_penalty:g} × share of "
                                          f"{invalid_actions}"
                                          if rewards.invalid_action_penalty else ""))
    extractor = "extractor reward = mean downstream success of its skill"
    penalties = [f"{value:g} for {what}" for value, what in (
        (rewards.format_penalty, "an unparseable skill"),
        (rewards.audit_penalty, "a skill failing the audit")) if value]
    if penalties:
        extractor += " − " + ", − ".join(penalties)
    return f"{solver}; {extractor}"


def save(fig: Any, path: str | Path, subtitle: str | None = None) -> Path:
    """Lay out, save at 100 dpi without a timestamp, and close `fig`; returns the path."""
    if subtitle:
        fig.suptitle(subtitle, fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 0.97))
    else:
        fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
