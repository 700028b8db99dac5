"""The numbers of an evaluation, computed from its case records alone (pure; no I/O).

`summarize(records, eval_metrics, train_types)` takes the `CaseRecord`s of one protocol on one
split and returns flat metrics: for every bucket (`all`, `task_type/<t>`, and with `train_types`
`group/training_types` and `group/held_out_types`) and arm (`with_skill`, `without_skill`; only
the latter under the no-skill protocol), the success rate and the environment's own metrics
(`eval_metrics`, e.g. Mind2Web's standard metrics) per repeat, then their mean and population
std over the repeats: `eval/<bucket>/<arm>_<metric>_mean|_std`, with the bucket's case count,
share of cases that obtained a skill, and each arm's wins and scored episodes over all repeats
(`_wins`, `_scored`: the counts a pooled significance test needs; `arm_wins` reads them
back). Episodes that failed for an
infrastructure reason leave the rates (they are counted in `eval/infra_failures`); cases with a
skill note are counted per note (`eval/note/<note>`). Records are sorted first, so the result
does not depend on the order cases finished in.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from evolving_rl.core.stats import Pooled
from evolving_rl.pipeline.eval_records import ARMS, CaseRecord

NO_SKILL = "no_skill"
EnvMetrics = Callable[[Sequence[Mapping[str, Any]]], dict[str, float]]


def _buckets(records: Sequence[CaseRecord],
             train_types: Collection[str] | None) -> dict[str, list[CaseRecord]]:
    buckets: dict[str, list[CaseRecord]] = defaultdict(list)
    for record in records:
        buckets["all"].append(record)
        buckets[f"task_type/{record.task_type}"].append(record)
        if train_types is not None:
            group = "training_types" if record.task_type in train_types else "held_out_types"
            buckets[f"group/{group}"].append(record)
    return buckets


def _repeat_values(members: Sequence[CaseRecord], arm: str,
                   eval_metrics: EnvMetrics) -> dict[str, float] | None:
    """Success rate and environment metrics of one arm over one repeat's cases."""
    scored = [m.arm(arm) for m in members if m.arm(arm).scored]
    if not scored:
        return None
    values = {"success": statistics.fmean(float(a.success) for a in scored)}
    values.update(eval_metrics([a.measures for a in scored]))
    return values


def _bucket_metrics(name: str, members: Sequence[CaseRecord], arms: Sequence[str],
                    eval_metrics: EnvMetrics) -> dict[str, float]:
    out: dict[str, float] = {f"eval/{name}/cases": float(len(members)),
                             f"eval/{name}/skill_obtained_rate": statistics.fmean(
                                 float(m.skill_obtained) for m in members)}
    repeats = sorted({m.repeat for m in members})
    for arm in arms:
        scored = [m.arm(arm) for m in members if m.arm(arm).scored]
        out[f"eval/{name}/{arm}_wins"] = float(sum(a.success for a in scored))
        out[f"eval/{name}/{arm}_scored"] = float(len(scored))
        per_repeat = [_repeat_values([m for m in members if m.repeat == r], arm, eval_metrics)
                      for r in repeats]
        found = [values for values in per_repeat if values is not None]
        for metric in sorted({key for values in found for key in values}):
            series = [values[metric] for values in found if metric in values]
            out[f"eval/{name}/{arm}_{metric}_mean"] = statistics.fmean(series)
            out[f"eval/{name}/{arm}_{metric}_std"] = statistics.pstdev(series)
    return out


def summarize(records: Sequence[CaseRecord], eval_metrics: EnvMetrics,
              train_types: Collection[str] | None = None) -> dict[str, float]:
    """Flat metrics of one protocol on one split (rules in the module docstring)."""
    ordered = sorted(records, key=lambda r: r.key)
    protocols = {r.protocol for r in ordered}
    if len(protocols) > 1 or len({r.split for r in ordered}) > 1:
        raise ValueError("summarize takes the records of one protocol on one split")
    arms = ("without_skill",) if protocols == {NO_SKILL} else ARMS
    out: dict[str, float] = {}
    for name, members in sorted(_buckets(ordered, train_types).items()):
        out.update(_bucket_metrics(name, members, arms, eval_metrics))
    out["eval/skill_obtained_rate"] = (statistics.fmean(float(r.skill_obtained) for r in ordered)
                                       if ordered else 0.0)
    out["eval/infra_failures"] = float(sum(
        1 for r in ordered for arm in (r.with_skill, r.without_skill)
        if arm is not None and not arm.scored))
    notes = Counter(r.skill_note for r in ordered if r.skill_note is not None)
    out.update({f"eval/note/{note}": float(n) for note, n in sorted(notes.items())})
    out["eval/cases"] = float(len(ordered))
    out["eval/repeats"] = float(len({r.repeat for r in ordered}))
    return out


def arm_wins(metrics: Mapping[str, Any], bucket: str, arm: str) -> Pooled | None:
    """The wins and scored episodes `summarize` recorded for `bucket` and `arm` (None when it
    recorded none)."""
    wins = metrics.get(f"eval/{bucket}/{arm}_wins")
    scored = metrics.get(f"eval/{bucket}/{arm}_scored")
    return None if wins is None or scored is None else Pooled(int(wins), int(scored))
