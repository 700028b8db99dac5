"""Held-out wins after training per method, evaluation protocol, arm and task-type group.

Owns `protocol_table(records)`: for every run's `eval` records of phase "after" (one per
protocol of `local.eval_protocols_after`), wins and scored episodes pooled over seeds per
(method, protocol, arm) in each group — all held-out tasks, the training task types, the
held-out task types (`pipeline.eval_report` buckets) — with two two-sided Fisher exact tests
(`core.stats`): against the same method's no-skill arm of the same protocol (does the card help
this solver?) and against the GRPO baseline's no-skill arm of the same protocol (is it better
than plain GRPO?). And `render_protocol_table`, its Markdown. Pure reading and arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evolving_rl.core.stats import Pooled, fisher_or_none, pool
from evolving_rl.pipeline.eval_report import arm_wins

GROUPS = (("all", "all"), ("training types", "group/training_types"),
          ("held-out types", "group/held_out_types"))
ARMS = ("without_skill", "with_skill")
BASELINE_METHOD = "grpo_baseline"

Records = Mapping[tuple[str, int], Sequence[Mapping[str, Any]]]


def _after_by_protocol(records: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """protocol -> the run's after-training eval record (runs before protocols were recorded
    count as `reference`)."""
    return {str(r.get("protocol", "reference")): r for r in records
            if r.get("kind") == "eval" and r.get("phase") == "after"}


def protocol_table(records: Records) -> list[dict[str, Any]]:
    """One row per (method, protocol, arm) with data: per group its pooled wins and the two
    tests of the module docstring (None where a side is missing or is the row itself)."""
    after = {key: _after_by_protocol(recs) for key, recs in records.items()}
    methods = list(dict.fromkeys(m for m, _ in records))
    protocols = list(dict.fromkeys(p for by in after.values() for p in by))

    def pooled(method: str, protocol: str, bucket: str, arm: str) -> Pooled | None:
        return pool([arm_wins(by[protocol], bucket, arm) for (m, _), by in after.items()
                     if m == method and protocol in by])

    rows = []
    for method in methods:
        for protocol in protocols:
            for arm in ARMS:
                groups = {}
                for name, bucket in GROUPS:
                    found = pooled(method, protocol, bucket, arm)
                    if found is None or not found.episodes:
                        continue
                    own = pooled(method, protocol, bucket, ARMS[0])
                    base = pooled(BASELINE_METHOD, protocol, bucket, ARMS[0])
                    groups[name] = {
                        "wins": found.wins, "episodes": found.episodes,
                        "p_vs_own_no_skill": None if arm == ARMS[0] else fisher_or_none(found, own),
                        "p_vs_baseline_no_skill": (None if (method, arm) == (BASELINE_METHOD,
                                                                             ARMS[0])
                                                   else fisher_or_none(found, base))}
                if groups:
                    rows.append({"method": method, "protocol": protocol, "arm": arm,
                                 "groups": groups})
    return rows


def _cell(group: Mapping[str, Any] | None) -> str:
    if group is None:
        return "–"
    text = f"{group['wins']}/{group['episodes']} ({100 * group['wins'] / group['episodes']:.1f}%)"
    tests = [f"{label} p={group[key]:.2g}" for label, key in
             (("vs own no-skill", "p_vs_own_no_skill"),
              ("vs GRPO no-skill", "p_vs_baseline_no_skill")) if group[key] is not None]
    return text + (f"; {', '.join(tests)}" if tests else "")


def render_protocol_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown lines of `protocol_table`'s rows (none when there are no rows)."""
    if not rows:
        return []
    lines = ["", "## Held-out wins after training by protocol and task-type group, pooled over "
             "seeds", "",
             "Two-sided Fisher exact p against the same method's no-skill arm of the same "
             "protocol and against the GRPO baseline's.", "",
             "| method | protocol | arm | " + " | ".join(name for name, _ in GROUPS) + " |",
             "|---|---|---|" + "---|" * len(GROUPS)]
    for row in rows:
        cells = [_cell(row["groups"].get(name)) for name, _ in GROUPS]
        lines.append(f"| {row['method']} | {row['protocol']} | {row['arm'].replace('_', ' ')} | "
                     + " | ".join(cells) + " |")
    return lines
