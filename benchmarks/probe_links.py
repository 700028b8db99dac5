"""The hidden probe's link table (issue 53 §1): each link of the skill path on its own.

    PYTHONPATH=. python -m benchmarks.probe_links --config configs/probe_hidden_gpu.yaml \\
        --model qwen2.5-coder-0.5b [--device cuda --dtype bfloat16] \\
        [--mechanism runs/probe_mechanism_gpu] [--limit 64] [--out runs/probe_links] [--tiny]

For one (untrained) model, greedy, on the valid split (the held-out families, retrieving from
valid) and the first `--limit` tasks of the train split (retrieving from train):

- (c) retrieval: the `reference` protocol's retrieved task is of the test task's family;
- (d) the solver with its family's hand-written card (`written_skill`; `probe.written_card`
  correct, then wrong) and with none: success, and how often it sends the answer the card
  states (a wrong card followed is a loss that names the card's answer);
- the `reference` protocol itself: the model's own greedy card from a retrieved task, with and
  without it;
- (a) extractions that parse and (b) parsed cards stating the family's answer (its digit and no
  other answer's; and, looser, quoting the feedback's "winning answer is k"): from the first
  training step of the runs in `--mechanism` (the output folder of benchmarks.probe_mechanism:
  step 1 of every `evolving` and `teacher` run is the untrained model sampling at the training
  temperature; a probe episode's feedback always reveals the answer, so every card could state
  it).

Each evaluation is one `python -m evolving_rl.evaluate` run with its own ports and folder; its
cases are read back from the case store. Beside every success rate: the no-information bar, the
best share one fixed answer wins on those tasks. `--model` is a `local.model` name (converted
once into `models/`) or an HF folder. `--tiny` (the test suite's smoke run): SmolLM2 on the CPU,
the valid split only, 8 tasks, 8-token extractions.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

from benchmarks.cli import parse_with_tiny
from benchmarks.probe_mechanism import CardCounts, card_counts
from env.launch import free_port
from env.probe.service import prepare_data
from evolving_rl.config import load_config
from evolving_rl.config.schema import ProbeConfig
from evolving_rl.domains.probe_tasks import stated_answer, task_for
from evolving_rl.local.model import resolve_model_path
from evolving_rl.pipeline.eval_records import CaseRecord

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
TINY = {"model": "smollm2", "config": "configs/probe_hidden_cpu.yaml",
        "out": "runs/probe_links/tiny", "splits": "valid"}
TINY_SETS = ["probe.valid_tasks=8", "sampling.eval_extractor.max_new_tokens=8"]
# (name, split, retrieval split, written card, protocols)
RUNS = (("valid", "valid", "valid", "correct", ("written_skill", "reference")),
        ("valid-wrong", "valid", "valid", "wrong", ("written_skill",)),
        ("train", "train", "train", "correct", ("written_skill", "reference")),
        ("train-wrong", "train", "train", "wrong", ("written_skill",)))


def run_eval(args: argparse.Namespace, model: Path, name: str, split: str, retrieval_split: str,
             card: str, protocols: tuple[str, ...]) -> Path:
    """One evaluation of the model in `<out>/<name>`; the folder."""
    folder = Path(args.out) / name
    port = free_port()
    sets = [*args.sets, f"probe.written_card={card}", f"probe.port={port}",
            f"retrieval.port={free_port(exclude=[port])}", f"probe.log_dir={folder / 'logs'}",
            f"retrieval.log_dir={folder / 'logs'}"]
    command = [sys.executable, "-m", "evolving_rl.evaluate", "--config", args.config,
               "--local", str(model), "--device", args.device, "--dtype", args.dtype,
               "--out", str(folder), "--protocols", *protocols, "--splits", split,
               "--retrieval-split", retrieval_split, "--repeats", "1"]
    if split == "train":
        command += ["--limit", str(args.limit)]
    for item in sets:
        command += ["--set", item]
    folder.mkdir(parents=True, exist_ok=True)
    logger.info("%s: %s", name, " ".join(command))
    with (folder / "eval.log").open("w") as log:
        subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    return folder


def read_cases(folder: Path) -> list[CaseRecord]:
    """The cases of the evaluation's store (`cases.jsonl`; stores an earlier run set aside under
    another key are not read)."""
    lines = (folder / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    return [CaseRecord.from_json(data) for data in map(json.loads, lines) if "protocol" in data]


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "0/0"


def bar(probe: ProbeConfig, ids: list[str]) -> str:
    """The no-information bar: the share the most frequent answer wins on these tasks."""
    answers = Counter(task_for(probe, task_id).answer for task_id in ids)
    return _share(max(answers.values()), len(ids)) if ids else "-"


def card_answer(probe: ProbeConfig, task_id: str, card: str) -> int:
    return stated_answer(task_for(probe, task_id).answer, probe.n_answers, card == "wrong")


def eval_rows(probe: ProbeConfig, name: str, card: str, cases: list[CaseRecord]) -> list[str]:
    """Table rows of one evaluation: written card, no card, and the reference protocol."""
    rows = []
    written = [c for c in cases if c.protocol == "written_skill" and c.with_skill is not None]
    ids = [c.task_id for c in written]
    if written:
        wins = sum(c.with_skill.success for c in written)
        follows = sum(c.with_skill.measures.get("chosen") == str(card_answer(probe, c.task_id,
                                                                             card))
                      for c in written)
        rows.append(f"| {name} | {card} hand-written card | {_share(wins, len(written))} | "
                    f"{_share(follows, len(written))} | {bar(probe, ids)} |")
        plain = [c.without_skill for c in written]
        chosen = Counter(arm.measures.get("chosen") for arm in plain)
        top = ", ".join(f"{k}: {v}" for k, v in chosen.most_common(4))
        rows.append(f"| {name} | no card | {_share(sum(a.success for a in plain), len(plain))} "
                    f"| answers sent: {top} | {bar(probe, ids)} |")
    reference = [c for c in cases if c.protocol == "reference"]
    if reference:
        with_card = [c for c in reference if c.with_skill is not None]
        rows.append(f"| {name} | reference: own greedy card "
                    f"| {_share(sum(c.with_skill.success for c in with_card), len(with_card))} "
                    f"| cards obtained {_share(len(with_card), len(reference))} "
                    f"| {bar(probe, [c.task_id for c in with_card])} |")
    return rows


def retrieval_rows(probe: ProbeConfig, name: str, cases: list[CaseRecord]) -> list[str]:
    reference = [c for c in cases if c.protocol == "reference" and c.retrieved_id]
    same = sum(task_for(probe, c.task_id).family == task_for(probe, c.retrieved_id).family
               for c in reference if task_for(probe, c.retrieved_id) is not None)
    return [f"| {name} | {_share(same, len(reference))} |"]


def extraction_rows(probe: ProbeConfig, mechanism: Path) -> list[str]:
    """(a), (b) over step 1 of every run under `mechanism` that extracted."""
    firsts = [card_counts(path.parent, probe).get("1", CardCounts())
              for path in sorted(mechanism.glob("**/run/skill_library.jsonl"))]
    total, parsed = sum(c.total for c in firsts), sum(c.parsed for c in firsts)
    return [f"| (a) extractions that parse | {_share(parsed, total)} |",
            f"| (b) parsed cards stating the family's answer (its digit only) "
            f"| {_share(sum(c.stated for c in firsts), parsed)} |",
            f"| (b') parsed cards quoting it (\"winning answer is k\", other digits allowed) "
            f"| {_share(sum(c.quoted for c in firsts), parsed)} |"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/probe_hidden_gpu.yaml")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b",
                        help="a local.model name or an HF folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--limit", type=int, default=64, help="train-split tasks")
    parser.add_argument("--mechanism", type=Path, help="benchmarks.probe_mechanism --out folder")
    parser.add_argument("--out", default="runs/probe_links")
    parser.add_argument("--splits", default="valid,train", help="valid, train or both")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.tiny:  # the splits and cache in --out too: nothing shared with another run
        args.sets = [*TINY_SETS, f"probe.prepared_dir={Path(args.out) / 'prepared'}",
                     f"retrieval.cache_path={Path(args.out) / 'cache.npz'}", *args.sets]
    cfg = load_config(args.config, args.sets)
    model = resolve_model_path(args.model)
    prepare_data(cfg)
    probe = cfg.probe
    evals = ["| split | card | success | sends the card's answer | no-information bar |",
             "| --- | --- | --- | --- | --- |"]
    retrieval = ["| split | retrieved task of the test task's family |", "| --- | --- |"]
    for name, split, retrieval_split, card, protocols in RUNS:
        if split not in args.splits.split(","):
            continue
        cases = read_cases(run_eval(args, model, name, split, retrieval_split, card, protocols))
        evals += eval_rows(probe, name, card, cases)
        retrieval += retrieval_rows(probe, name, cases) if "reference" in protocols else []
    print(f"\nLinks of {model} ({args.config}):\n")
    if args.mechanism is not None:
        print("| link | measured |\n| --- | --- |")
        print("\n".join(extraction_rows(probe, args.mechanism)) + "\n")
    print("(c) retrieval\n\n" + "\n".join(retrieval) + "\n")
    print("(d) the solver and a card\n\n" + "\n".join(evals))


if __name__ == "__main__":
    main()
