"""Methods x seeds of one local profile, run side by side on one machine, and their aggregate.

    python -m evolving_rl.local.experiments.compare --config configs/local_gpu.yaml \\
        --seeds 0,1,2 --methods evolving,grpo_baseline --parallel 6 --out runs/local_gpu_compare

Owns the plan (one run per (method, seed): `pipeline.method`, `run.seed`, its own output folder
`<out>/<method>_seed<seed>/`, its own loopback ports and server log folders), the launch (the
shared data, retrieval cache and model are prepared once here, then every run is a child process
`python -m evolving_rl.local`, at most `--parallel` at a time, its output in `<run>/job.log`) and
the aggregate (`compare_report`: curves and held-out table, mean ± std over seeds). Every run's
preflight (`local.preflight`) passes before anything is prepared or an earlier run moved.

Ports: every config field named `port` or `*_port` is shifted by `run index x stride`, the
smallest stride (a multiple of `PORT_BLOCK`) at which the blocks of `PORT_BLOCK` ports from each
of a run's ports (room for a worker range) meet no other run's; the launchers refuse a port that
is already held.
`--aggregate-only` re-reads finished run folders without starting anything.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from evolving_rl.config import ConfigError, load_config, to_dict
from evolving_rl.config.schema import Config, PipelineConfig
from evolving_rl.domains.registry import domain_for
from evolving_rl.local.experiments.compare_report import write_report

logger = logging.getLogger(__name__)

#: The values of `pipeline.method`, from the schema.
METHODS: tuple[str, ...] = typing.get_args(typing.get_type_hints(PipelineConfig)["method"])
PORT_BLOCK = 32


@dataclass(frozen=True)
class PlannedRun:
    """One child run: its method, seed, folder and the overrides that make it so."""

    method: str
    seed: int
    run_dir: Path
    overrides: tuple[str, ...]


def _section_values(cfg: Config) -> dict[str, object]:
    """Every `section.field` key of the config's sections with its value (`to_dict`)."""
    return {f"{section}.{name}": value for section, fields in to_dict(cfg).items()
            if isinstance(fields, dict) for name, value in fields.items()}


def _port_fields(cfg: Config) -> list[tuple[str, int]]:
    """Every `section.port` / `section.*_port` key of the config with its value."""
    return [(key, int(value)) for key, value in _section_values(cfg).items()
            if key.endswith((".port", "_port"))]


def _log_dir_keys(cfg: Config) -> list[str]:
    return [key for key in _section_values(cfg) if key.endswith(".log_dir")]


def port_stride(ports: list[int], n_runs: int) -> int:
    """The smallest multiple of `PORT_BLOCK` keeping the runs' port blocks disjoint."""
    stride = PORT_BLOCK
    while True:
        blocks = [{p + i * stride + k for p in ports for k in range(PORT_BLOCK)}
                  for i in range(n_runs)]
        if len(set().union(*blocks)) == sum(len(b) for b in blocks):
            return stride
        stride += PORT_BLOCK


def plan_runs(cfg: Config, methods: list[str], seeds: list[int], out: Path) -> list[PlannedRun]:
    """One run per (method, seed), method-major, each on its own ports."""
    ports = _port_fields(cfg)
    values = [value for _, value in ports]
    stride = port_stride(values, len(methods) * len(seeds)) if values else 0
    runs = []
    for index, (method, seed) in enumerate((m, s) for m in methods for s in seeds):
        run_dir = out / f"{method}_seed{seed}"
        shift = index * stride
        if values and max(values) + shift > 65535:
            raise ConfigError("compare", f"run {index} needs ports above 65535; use fewer runs")
        overrides = [f"pipeline.method={method}", f"run.seed={seed}", f"run.output_dir={run_dir}"]
        overrides += [f"{key}={value + shift}" for key, value in ports]
        overrides += [f"{key}={run_dir / 'logs' / key.split('.')[0]}" for key in _log_dir_keys(cfg)]
        runs.append(PlannedRun(method, seed, run_dir, tuple(overrides)))
    return runs


def prepare_shared(cfg: Config) -> None:
    """Data, retrieval cache and the converted model once, before the runs (each run then finds
    them ready instead of writing them at the same time as the others)."""
    from evolving_rl.local.model import resolve_model_path
    from evolving_rl.local.servers import build_retrieval_cache, env_services

    env_services(cfg).prepare_data(cfg)
    build_retrieval_cache(cfg)
    resolve_model_path(cfg.local.model, cfg.local.models_dir)


def preflight_runs(runs: list[PlannedRun], config: str, overrides: list[str]) -> None:
    """Every run's `local.preflight` (as its child would run it) before anything is prepared or
    archived: a run that cannot start stops the comparison with nothing moved (each run's disk
    check counts its own checkpoints only)."""
    from evolving_rl.local.preflight import preflight
    from evolving_rl.local.servers import env_services

    for run in runs:
        cfg = load_config(config, [*overrides, *run.overrides])
        try:
            preflight(cfg, env_services(cfg))
        except ConfigError as err:
            raise ConfigError("", f"{run.method} seed {run.seed}: {err}") from None


def launch(run: PlannedRun, config: str, overrides: list[str]) -> int:
    """Run one child job to its end; its stdout and stderr go to `<run>/job.log`. The child
    gets SIGTERM if this process dies first (and its servers with it: `local.servers.servers`)."""
    from env.launch import dies_with_parent
    from evolving_rl.local.job import LAUNCHER_LOG, archive_previous_run

    run.run_dir.mkdir(parents=True, exist_ok=True)
    archive_previous_run(run.run_dir, keep=())  # the earlier run's log too, before ours opens
    cmd = [sys.executable, "-m", "evolving_rl.local", "--config", config]
    for item in (*overrides, *run.overrides):
        cmd += ["--set", item]
    started = time.perf_counter()
    with open(run.run_dir / LAUNCHER_LOG, "w", encoding="utf-8") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
                              preexec_fn=dies_with_parent(), check=False).returncode
    logger.info("%s seed %d: exit %d after %.1f min", run.method, run.seed, code,
                (time.perf_counter() - started) / 60)
    return code


def run_all(runs: list[PlannedRun], config: str, overrides: list[str], parallel: int) -> int:
    """Every planned run, `parallel` at a time; the number of runs that failed."""
    from evolving_rl.local.job import LAUNCHER_LOG

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        codes = list(pool.map(lambda run: launch(run, config, overrides), runs))
    for run, code in zip(runs, codes, strict=True):
        if code:
            logger.error("%s seed %d failed (exit %d): see %s", run.method, run.seed, code,
                         run.run_dir / LAUNCHER_LOG)
    return sum(1 for code in codes if code)


def _csv(kind: type, text: str) -> list:
    return [kind(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local_gpu.yaml")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time")
    parser.add_argument("--out", help="folder of the runs (default: <run.output_dir>_compare)")
    parser.add_argument("--aggregate-only", action="store_true",
                        help="only aggregate the run folders already under --out")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key for every run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    methods, seeds = _csv(str, args.methods), _csv(int, args.seeds)
    if not methods or not set(methods) <= set(METHODS) or not seeds or args.parallel < 1:
        parser.error(f"--methods takes some of {','.join(METHODS)}; --seeds and --parallel "
                     "need at least one")
    try:
        cfg = load_config(args.config, args.overrides)
        out = Path(args.out or f"{cfg.run.output_dir}_compare")
        runs = plan_runs(cfg, methods, seeds, out)
        if not args.aggregate_only:
            preflight_runs(runs, args.config, args.overrides)
    except ConfigError as err:
        logger.error("%s", err)
        return 2
    failed = 0
    if not args.aggregate_only:
        prepare_shared(cfg)
        failed = run_all(runs, args.config, args.overrides, args.parallel)
    report = write_report([(r.method, r.seed, r.run_dir) for r in runs], out,
                          domain_for(cfg).invalid_actions)
    logger.info("comparison written to %s", report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
