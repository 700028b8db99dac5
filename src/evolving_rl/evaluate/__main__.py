"""Evaluate a checkpoint or a running policy server: `python -m evolving_rl.evaluate`.

    python -m evolving_rl.evaluate --config configs/local_cpu.yaml \\
        --local runs/local_cpu/checkpoints/step_0003 --out runs/eval/local_cpu \\
        [--protocols reference no_skill] [--splits valid_unseen] [--repeats 3] [--limit 20]
    python -m evolving_rl.evaluate --config configs/alfworld.yaml \\
        --sglang-url http://127.0.0.1:30000 --tokenizer models/Qwen2.5-7B-Instruct --out ...

Policy: `--local DIR` (an HF folder run in-process; `--device`, `--dtype`), `--sglang-url` or
`--openai-url` (+ `--openai-model`) with `--tokenizer`. Splits default to the environment's test
splits (ALFWorld valid_seen + valid_unseen; Mind2Web test_task, test_website, test_domain);
training task types (the held-out breakdown) are those of `--train-split` (default: the config's
`pipeline.retrieval_split`, the split the run trained on); retrieval looks in
`--retrieval-split` (default `train`, all training tasks, as the reference's eval did). The env
and retrieval servers are started and stopped here unless `--no-servers`. Finished cases are
kept in `<out>/cases.jsonl` under the key of what they were computed from (the checkpoint's
files, the outcome-changing settings, the data and the game files it names, the code:
`evaluate.provenance`): rerunning the same command on the same checkpoint and code resumes,
another checkpoint (or config, data, game file or source file) in the same `--out` sets the old
cases aside and runs again; `--fresh` starts over. Writes `<out>/report.json`, `report.md`
(both say the policy's, config's, data's and code's digests) and a chart per split. Exit 2 on a
bad argument or config, or a protocol the environment cannot run (expert_skill and written_skill:
ALFWorld only), or a `--local` folder with no model (the line lists the checkpoints that exist)
or a missing `--tokenizer` folder; all before any stored case is read or any server starts. Exit 2
also when cases remain to run on a device torch cannot use here (`--device cuda` on a machine
without CUDA; `retrieval.device` when the servers start here): before the stored cases are set
aside or anything starts, so the rerun with a usable device resumes them. Exit 2, with one line
naming the file and line, when a prepared split does not parse (a truncated file, say).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from evolving_rl.config import ConfigError, load_config
from evolving_rl.domains.registry import domain_for
from evolving_rl.evaluate.policies import MissingCheckpointError, PolicySpec
from evolving_rl.evaluate.report import write_report
from evolving_rl.evaluate.runner import (
    EvalRequest,
    MissingSplitError,
    UnusableDeviceError,
    run_evaluation,
)
from evolving_rl.pipeline.evaluation import EvalProtocol, UnsupportedProtocolError
from evolving_rl.retrieval.prepared import PreparedDataError

log = logging.getLogger("evolving_rl.evaluate")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--local", metavar="DIR", help="HF folder run in-process")
    source.add_argument("--sglang-url", metavar="URL")
    source.add_argument("--openai-url", metavar="URL")
    parser.add_argument("--openai-model", default="default")
    parser.add_argument("--tokenizer", metavar="DIR", help="HF folder with the tokenizer")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--protocols", nargs="+", default=["reference"],
                        choices=[str(p) for p in EvalProtocol],
                        help="evaluation protocols (docs/design.md §8)")
    parser.add_argument("--splits", nargs="+")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, help="tasks per split (round-robin over types)")
    parser.add_argument("--retrieval-split", default="train")
    parser.add_argument("--train-split")
    parser.add_argument("--library", type=Path, help="skill_library.jsonl (protocol library)")
    parser.add_argument("--no-servers", action="store_true",
                        help="use servers already running at the config's addresses")
    parser.add_argument("--fresh", action="store_true", help="forget finished cases")
    return parser


def _spec(args: argparse.Namespace) -> PolicySpec:
    if args.local:
        return PolicySpec("local", path=args.local, tokenizer=args.tokenizer,
                          device=args.device, dtype=args.dtype)
    kind = "sglang" if args.sglang_url else "openai"
    return PolicySpec(kind, url=args.sglang_url or args.openai_url, tokenizer=args.tokenizer,
                      model=args.openai_model)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config, args.overrides)
        domain = domain_for(cfg)
        spec = _spec(args)
        request = EvalRequest(
            out_dir=args.out, splits=tuple(args.splits or domain.eval_splits),
            protocols=tuple(EvalProtocol(p) for p in dict.fromkeys(args.protocols)),
            repeats=args.repeats, limit=args.limit, retrieval_split=args.retrieval_split,
            train_split=args.train_split or cfg.pipeline.retrieval_split, library=args.library,
            start_servers=not args.no_servers, fresh=args.fresh)
    except (ConfigError, ValueError) as error:
        parser.error(str(error))
    try:
        outcome = run_evaluation(cfg, spec, request)
    except (MissingSplitError, MissingCheckpointError, UnsupportedProtocolError,
            UnusableDeviceError, PreparedDataError) as error:
        log.error("%s", error)
        return 2
    meta = {"environment": cfg.environment, "policy": spec.describe(), **outcome.key.as_meta(),
            "protocols": [str(p) for p in request.protocols], "repeats": request.repeats,
            "splits": list(request.splits), "limit": request.limit,
            "retrieval_split": request.retrieval_split, "train_split": request.train_split,
            "train_types": sorted(outcome.train_types),
            "solver_decoding": cfg.sampling.eval_solver.decoding()}
    for path in write_report(args.out, meta, outcome.results):
        log.info("wrote %s", path)
    sys.stdout.write((args.out / "report.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
