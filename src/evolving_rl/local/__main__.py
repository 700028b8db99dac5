"""Entry point of the main job on the embedded default (`scripts/run_local.sh`).

    python -m evolving_rl.local --config configs/local_cpu.yaml [--set local.train_steps=1]

Validates the config, runs `evolving_rl.local.job.run_job` (data, retrieval cache, servers,
before/after evaluation around `local.train_steps` GRPO steps) and prints a one-screen summary,
also written to `<run>/summary.txt`. Exit 2 on a config the job refuses before it starts; exit 1
with one line naming the file when a write of the run fails (a full disk, a file-size limit).
"""

from __future__ import annotations

import argparse
import errno
import logging
import sys
import time
from pathlib import Path
from typing import Any

from evolving_rl.config import ConfigError, load_config
from evolving_rl.local.job import ARCHIVE_PREFIX, JobResult, run_job
from evolving_rl.local.metrics import RunWriteError
from evolving_rl.local.run_lock import LOCK_FILE
from evolving_rl.local.trainer import STATE_FILE
from evolving_rl.retrieval.prepared import PreparedDataError

log = logging.getLogger("evolving_rl.local")
# A write the filesystem refused for room: no space, over the file-size limit, over the quota.
FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


def _pct(value: Any) -> str:
    return "  n/a" if value is None else f"{100 * float(value):5.1f}%"


def _arms(record: dict[str, Any], bucket: str) -> str:
    arms = []
    for arm in ("without_skill", "with_skill"):
        mean = record.get(f"eval/{bucket}/{arm}_success_mean")
        std = record.get(f"eval/{bucket}/{arm}_success_std")
        if mean is not None:
            arms.append(f"{arm.replace('_', ' ')} {_pct(mean)} ± {_pct(std).strip()}")
    return ", ".join(arms) or "n/a"


def _eval_lines(phase: str, records: list[dict[str, Any]]) -> list[str]:
    """One line a protocol, and one a task-type group where the run has held-out types."""
    if not records:
        return [f"  {phase:6s}: not evaluated"]
    lines = []
    for record in records:
        lines.append(f"  {phase:6s} {record.get('protocol', 'reference')}: {_arms(record, 'all')}"
                     f"; skill obtained {_pct(record.get('eval/skill_obtained_rate')).strip()} "
                     f"of {record.get('eval/cases', 0):.0f} cases")
        if "eval/group/held_out_types/cases" in record:
            lines += [f"    {group.replace('_', ' ')}: {_arms(record, f'group/{group}')}"
                      for group in ("training_types", "held_out_types")]
    return lines


def _train_line(record: dict[str, Any]) -> str:
    return (f"  step {record['step']}: reward solver {record.get('solver/reward_mean', 0):.2f} "
            f"extractor {record.get('extractor/reward_mean', 0):.2f} | success source "
            f"{_pct(record.get('source/success_rate')).strip()} downstream "
            f"{_pct(record.get('solver/success_rate')).strip()} | groups with varied rewards "
            f"{record.get('varied_groups', 0):.0f}/{record.get('groups', 0):.0f} (solver "
            f"{record.get('solver_varied_groups', 0):.0f}/{record.get('solver_groups', 0):.0f}, "
            f"extractor {record.get('extractor_varied_groups', 0):.0f}/"
            f"{record.get('extractor_groups', 0):.0f}) | samples "
            f"{record.get('train/n_samples', 0)} loss {record.get('train/loss', 0):+.4f} "
            f"kl {record.get('train/kl', 0):.4f} ({record.get('train/duration_s', 0):.0f}s)"
            + (" | update skipped: non-finite gradient" if record.get("train/skipped") else ""))


def summary(result: JobResult, wall_s: float, eval_decoding: str) -> str:
    stages = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in result.stage_s.items())
    lines = [f"Local run finished in {wall_s / 60:.1f} min ({stages})",
             f"Held-out evaluation ({eval_decoding}):",
             *_eval_lines("before", result.before), *_eval_lines("after", result.after),
             "Training:"]
    lines += [_train_line(record) for record in result.train]
    lines += [f"Outputs in {result.run_dir}: {', '.join(outputs(result.run_dir))}",
              f"Checkpoint: {result.checkpoint}" + (f" ({_size_mb(result.checkpoint)})"
                                                   if result.checkpoint else "")]
    return "\n".join(lines)


def outputs(run_dir: Path) -> list[str]:
    """Every entry the run wrote in its folder (earlier runs' archives left out), summary.txt
    included (written with this text)."""
    names = {path.name + ("/" if path.is_dir() else "") for path in run_dir.iterdir()
             if not path.name.startswith(ARCHIVE_PREFIX) and path.name != LOCK_FILE
             } if run_dir.is_dir() else set()
    return sorted(names | {"summary.txt"})


def _size_mb(folder: Path) -> str:
    """Total size of a checkpoint folder, and how much of it is the trainer state."""
    sizes = {path.name: path.stat().st_size for path in folder.rglob("*") if path.is_file()}
    state = sizes.get(STATE_FILE, 0)
    return (f"{sum(sizes.values()) / 1e6:.0f} MB, of which trainer state {state / 1e6:.0f} MB; "
            "local.save_trainer_state=false keeps only the weights")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (local.train_steps=1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    try:
        cfg = load_config(args.config, args.overrides)

        def write_summary(result: JobResult) -> None:
            text = summary(result, time.perf_counter() - started,
                           cfg.sampling.eval_solver.decoding())
            (result.run_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
            print(text)

        run_job(cfg, finish=write_summary)
    except (ConfigError, PreparedDataError) as err:  # an invalid config, a folder another job
        log.error("%s", err)  # holds, an environment with no registered domain, a prepared split
        return 2              # that does not parse or is not the one its manifest describes
    except OSError as err:
        if not isinstance(err, RunWriteError) and err.errno not in FULL:
            raise
        log.error("%s", err)  # a file of the run could not be written: one line naming it
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
