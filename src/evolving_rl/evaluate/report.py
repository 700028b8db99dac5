"""The evaluation's outputs: `report.json`, `report.md` and one PNG chart per split.

Owns `write_report(out_dir, meta, results)`. `results` is split -> protocol -> the flat metrics
of `pipeline.eval_report`; `meta` says what was evaluated (environment, policy, protocols,
repeats, training task types, how the solver decoded) and what the cases were computed from
(the digests of `evaluate.provenance`). Everything is derived from those two, with no clock or
host in it, so a resumed run writes byte-identical reports. The Markdown report has a line
naming those digests and, per split: success with and without the skill per protocol (mean ±
std over the repeats), the training / held-out task-type groups, the cases with a skill note
(e.g. an expert trajectory missing or not won), a per-task-type table, the environment's own
metrics (Mind2Web's standard metrics, a second row under the reference's fallback on steps
without a positive candidate where that differs, and the reference's first-error action
accuracy) and, where published numbers exist (`evaluate.published`), a table against them for
the task-type groups the run measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evolving_rl.evaluate.published import published_for
from evolving_rl.local.plot_style import bar_legend, colour, label_bars, plt, rate_axis, save

Results = Mapping[str, Mapping[str, Mapping[str, float]]]
ARMS = (("with_skill", "with skill"), ("without_skill", "without skill"))
ENV_METRICS = (("element_accuracy", "element acc."), ("op_f1", "op. F1"),
               ("step_success_rate", "step SR"), ("task_success_rate", "task SR"),
               ("first_error_action_accuracy", "first-error action acc. (reference's)"))
FALLBACK = "reference_fallback_"  # the standard metrics under the reference's empty-positive rule
FALLBACK_LABEL = "reference's fallback on steps without a positive candidate"


def _pct(metrics: Mapping[str, float], bucket: str, arm: str, metric: str = "success") -> str:
    mean = metrics.get(f"eval/{bucket}/{arm}_{metric}_mean")
    if mean is None:
        return "–"
    std = metrics.get(f"eval/{bucket}/{arm}_{metric}_std", 0.0)
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _buckets(metrics: Mapping[str, float], prefix: str) -> list[str]:
    """The bucket names of `eval/<prefix>/<name>/<metric>` keys; a name may hold "/" (Mind2Web's
    task types are domain/subdomain: "Travel/Hotel")."""
    head = f"eval/{prefix}/"
    return sorted({key[len(head):].rsplit("/", 1)[0] for key in metrics if key.startswith(head)})


def _success_rows(split_results: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    rows = []
    for protocol, metrics in split_results.items():
        for bucket in ["all", *[f"group/{g}" for g in _buckets(metrics, "group")]]:
            rows.append([protocol, bucket.removeprefix("group/"),
                         _pct(metrics, bucket, "with_skill"),
                         _pct(metrics, bucket, "without_skill"),
                         f"{100 * metrics.get(f'eval/{bucket}/skill_obtained_rate', 0.0):.0f}%",
                         f"{metrics.get(f'eval/{bucket}/cases', 0):.0f}",
                         f"{metrics.get('eval/infra_failures', 0):.0f}"])
    return rows


def _task_type_rows(split_results: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    return [[protocol, task_type, _pct(metrics, f"task_type/{task_type}", "with_skill"),
             _pct(metrics, f"task_type/{task_type}", "without_skill")]
            for protocol, metrics in split_results.items()
            for task_type in _buckets(metrics, "task_type")]


def _env_metric_rows(split_results: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    """Per protocol and arm the standard metrics, then, where they differ, the same under the
    reference's fallback on steps without a positive candidate (Mind2Web)."""
    rows = []
    for protocol, metrics in split_results.items():
        for arm, label in ARMS:
            if f"eval/all/{arm}_{ENV_METRICS[0][0]}_mean" not in metrics:
                continue
            rows.append([protocol, label,
                         *[_pct(metrics, "all", arm, name) for name, _ in ENV_METRICS]])
            fallback = [_pct(metrics, "all", arm, f"{FALLBACK}{name}")
                        for name, _ in ENV_METRICS[:-1]]
            if "–" not in fallback and fallback != rows[-1][2:-1]:
                rows.append([protocol, f"{label}, {FALLBACK_LABEL}", *fallback, "–"])
    return rows


def _published_rows(environment: str, split: str,
                    split_results: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    """Published numbers beside ours, for the task-type groups this run measured."""
    ours = split_results.get("reference", {})
    return [[number.method, number.group.removeprefix("group/"), f"{number.success_pct:.1f}",
             _pct(ours, number.group, "with_skill"), _pct(ours, number.group, "without_skill")]
            for number in published_for(environment, split)
            if f"eval/{number.group}/cases" in ours]


def _note_rows(split_results: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    return [[protocol, key.removeprefix("eval/note/"), f"{value:.0f}"]
            for protocol, metrics in split_results.items()
            for key, value in sorted(metrics.items()) if key.startswith("eval/note/")]


def _split_section(environment: str, split: str,
                   split_results: Mapping[str, Mapping[str, float]]) -> list[str]:
    lines = [f"## {split}", "", "Success (%), mean ± std over repeats:", ""]
    lines += _table(["protocol", "tasks", "with skill", "without skill", "skill obtained",
                     "cases", "infra failures"], _success_rows(split_results))
    notes = _note_rows(split_results)
    if notes:
        lines += ["", "Cases with a skill note:", ""]
        lines += _table(["protocol", "note", "cases"], notes)
    env_rows = _env_metric_rows(split_results)
    if env_rows:
        lines += ["", "Standard metrics (%), macro over tasks:", ""]
        lines += _table(["protocol", "arm", *[label for _, label in ENV_METRICS]], env_rows)
    published = _published_rows(environment, split, split_results)
    if published:
        lines += ["", "Against the published numbers (ours: the reference protocol):", ""]
        lines += _table(["published", "tasks", "published %", "ours with skill",
                         "ours without skill"], published)
    elif published_for(environment, split):
        lines += ["", "Published numbers exist for this split by training and held-out task "
                  "types; this run has no such grouping (run the reference protocol with "
                  "--train-split) or no reference protocol, so they are not compared."]
    lines += ["", "Per task type (%):", ""]
    lines += _table(["protocol", "task type", "with skill", "without skill"],
                    _task_type_rows(split_results))
    return [*lines, "", f"![{split}]({split}.png)", ""]


def _chart(path: Path, split: str, split_results: Mapping[str, Mapping[str, float]]) -> None:
    """Success per task type, without and with a skill, in the project's one plot style."""
    protocol, metrics = next(iter(split_results.items()))
    types = _buckets(metrics, "task_type")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(types) + 2), 4))
    width = 0.4
    for offset, (arm, label) in zip((-width / 2, width / 2), reversed(ARMS), strict=True):
        means = [metrics.get(f"eval/task_type/{t}/{arm}_success_mean") for t in types]
        stds = [metrics.get(f"eval/task_type/{t}/{arm}_success_std") or 0.0 for t in types]
        bars = ax.bar([i + offset for i in range(len(types))], [m or 0.0 for m in means],
                      width, yerr=stds, label=label, capsize=3, color=colour(arm))
        label_bars(ax, bars, means)
    ax.set_xticks(range(len(types)), types, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("success")
    rate_axis(ax)
    cases = int(metrics.get("eval/cases", 0))
    ax.set_title(f"{split}: success per task type\n({protocol} protocol, {cases} "
                 f"case{'' if cases == 1 else 's'})", fontsize=10)
    bar_legend(ax)
    save(fig, path)


def _provenance(meta: Mapping[str, Any]) -> list[str]:
    """What the cases were computed from (`evaluate.provenance`), when the meta says it."""
    if "cases_key" not in meta:
        return []
    served = "" if str(meta.get("policy", "")).startswith("local:") else (
        " (a served model: its URL, model name and tokenizer only, not its weights)")
    return ["", f"Computed from: policy {meta.get('policy')} digest {meta.get('policy_digest')}"
            f"{served}; config digest {meta.get('config_digest')}; protocol settings digest "
            f"{meta.get('protocol_digest')}; data digest {meta.get('data_digest')}; code digest "
            f"{meta.get('code_digest')} (cases key {meta['cases_key']})."]


def write_report(out_dir: Path, meta: Mapping[str, Any], results: Results) -> list[Path]:
    """Write report.json, report.md and `<split>.png` per split; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report_json = out_dir / "report.json"
    report_json.write_text(json.dumps({"meta": meta, "results": results}, indent=2,
                                      sort_keys=True) + "\n", encoding="utf-8")
    lines = [f"# Evaluation: {meta.get('environment')} — {meta.get('policy')}", "",
             f"Protocols: {', '.join(meta.get('protocols', []))}; repeats: "
             f"{meta.get('repeats')}; solver {meta.get('solver_decoding', 'greedy')}. "
             "Training task types: "
             f"{', '.join(meta.get('train_types', [])) or '–'}.", *_provenance(meta), ""]
    written = [report_json]
    for split, split_results in results.items():
        lines += _split_section(str(meta.get("environment")), split, split_results)
        chart = out_dir / f"{split}.png"
        _chart(chart, split, split_results)
        written.append(chart)
    report_md = out_dir / "report.md"
    report_md.write_text("\n".join(lines), encoding="utf-8")
    return [report_md, *written]
