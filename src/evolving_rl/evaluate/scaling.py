"""The skill-use scaling table: several models' evaluations of one held-out split side by side.

    python -m evolving_rl.evaluate.scaling --split valid_unseen --out table.md \\
        --model SmolLM2-135M runs/scaling/smollm2 models/smollm2-135m-instruct \\
        --model Qwen2.5-Coder-0.5B runs/scaling/q05 models/qwen2.5-coder-0.5b-instruct

Owns `scaling_rows` and `render_scaling`: for each model, the `report.json` of its
`scripts/alfworld/eval.sh` run (protocols `no_skill`, `written_skill`, `expert_skill`,
`reference` on the same tasks and repeats) gives wins / scored episodes per arm — the
`no_skill` protocol's episodes, and each other protocol's with-skill episodes — in every group
(all tasks, the training task types, the held-out ones), each tested against `no_skill` by a
two-sided Fisher exact test (`core.stats`); episodes lost to infrastructure failures are apart
(`eval/infra_failures`). The why-columns tell a weak model from a weak skill: the hand-written
cards' length in the model's own tokens against the profile's context (`pipeline.
max_context_tokens`), and, when the run folder holds `probe.json` (benchmarks/skill_use_probe.py
`--out`), how often the expert's command is the model's top choice without and with the card.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolving_rl.core.stats import fisher_or_none
from evolving_rl.pipeline.eval_report import arm_wins

logger = logging.getLogger(__name__)

BASE = "no_skill"
WITH_SKILL = ("written_skill", "expert_skill", "reference")
GROUPS = (("all", "all"), ("training types", "group/training_types"),
          ("held-out types", "group/held_out_types"))


@dataclass(frozen=True)
class ModelRun:
    """One model: its label, its evaluation folder and its HF folder (for the tokenizer)."""

    label: str
    eval_dir: Path
    model_dir: Path


def protocol_cells(results: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """protocol -> group -> {wins, episodes, p (vs no_skill), infra} for the arms of the table."""
    out: dict[str, dict[str, Any]] = {}
    base = results.get(BASE, {})
    for protocol in (BASE, *WITH_SKILL):
        metrics = results.get(protocol)
        if metrics is None:
            continue
        arm = "without_skill" if protocol == BASE else "with_skill"
        cells: dict[str, Any] = {"infra_failures": int(metrics.get("eval/infra_failures", 0))}
        for name, bucket in GROUPS:
            found = arm_wins(metrics, bucket, arm)
            if found is None or not found.episodes:
                continue
            p = (fisher_or_none(found, arm_wins(base, bucket, "without_skill"))
                 if protocol != BASE else None)
            cells[name] = {"wins": found.wins, "episodes": found.episodes, "p": p}
        out[protocol] = cells
    return out


def card_lengths(model_dir: Path) -> tuple[int, int]:
    """Shortest and longest hand-written card in the model's tokens (no special tokens)."""
    from evolving_rl.domains.alfworld_written_skills import load_written_skills
    from evolving_rl.local.model import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    lengths = [len(tokenizer.encode(card, add_special_tokens=False))
               for card in load_written_skills().values()]
    return min(lengths), max(lengths)


def _probe(eval_dir: Path) -> dict[str, Any] | None:
    path = eval_dir / "probe.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def scaling_rows(models: Sequence[ModelRun], split: str, context_tokens: int) -> list[dict]:
    """One row per model: its protocol cells on `split` and the why-columns."""
    rows = []
    for model in models:
        report = json.loads((model.eval_dir / "report.json").read_text(encoding="utf-8"))
        short, long = card_lengths(model.model_dir)
        rows.append({"model": model.label, "meta": report.get("meta", {}),
                     "cells": protocol_cells(report["results"][split]),
                     "card_tokens": [short, long], "context_tokens": context_tokens,
                     "probe": _probe(model.eval_dir)})
    return rows


def _cell(cell: Mapping[str, Any] | None) -> str:
    if not cell:
        return "–"
    text = f"{cell['wins']}/{cell['episodes']} ({100 * cell['wins'] / cell['episodes']:.1f})"
    return text + (f", p = {cell['p']:.2g}" if cell.get("p") is not None else "")


def _why(row: Mapping[str, Any]) -> str:
    short, long = row["card_tokens"]
    text = f"card {short}-{long} tokens ({100 * long / row['context_tokens']:.0f}% of context)"
    probe = row["probe"]
    if probe and "none" in probe and "system" in probe:
        text += (f"; probe top-1 {100 * probe['none']['top1']:.0f}% -> "
                 f"{100 * probe['system']['top1']:.0f}% with the card "
                 f"(chance {100 * probe['none']['chance_top1']:.0f}%)")
    return text


def render_scaling(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table per group: wins / scored episodes (%) per protocol, p vs no_skill."""
    protocols = (BASE, *WITH_SKILL)
    lines = []
    for name, _ in GROUPS:
        lines += [f"### {name}", "", "| model | " + " | ".join(protocols) + " | infra failures |",
                  "|---|" + "---|" * (len(protocols) + 1)]
        for row in rows:
            cells = row["cells"]
            infra = sum(c.get("infra_failures", 0) for c in cells.values())
            lines.append(f"| {row['model']} | " + " | ".join(
                _cell(cells.get(p, {}).get(name)) for p in protocols) + f" | {infra} |")
        lines.append("")
    lines += ["### why", "", "| model | written card and probe |", "|---|---|"]
    lines += [f"| {row['model']} | {_why(row)} |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", nargs=3, action="append", required=True,
                        metavar=("LABEL", "EVAL_DIR", "MODEL_DIR"))
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--context-tokens", type=int, default=4096,
                        help="the profile's pipeline.max_context_tokens")
    parser.add_argument("--out", type=Path, required=True, help="Markdown; JSON beside it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    models = [ModelRun(label, Path(run), Path(folder)) for label, run, folder in args.model]
    rows = scaling_rows(models, args.split, args.context_tokens)
    args.out.write_text(render_scaling(rows), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=2, default=str) + "\n",
                                             encoding="utf-8")
    sys.stdout.write(args.out.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
