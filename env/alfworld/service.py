"""What the local main job needs from the ALFWorld server side: ALFWorld's `Domain.services`.

Owns `prepare_data(cfg)`: generate a small game set with `generate` when the data root holds no
games (`local.games_per_type` per task type and split on `local.generator_workers` processes,
room sizes and task types from `alfworld.generator_*`), then (re)write the prepared splits with
`prepare`; `serve(cfg)`: the router + workers of `launch` for the duration of a block,
stopped on any exit; and `ports(cfg)`: the ports they bind, by config key (checked free before
the job writes anything, `evolving_rl.local.preflight`).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from env.alfworld import launch
from env.alfworld.gen_task import RoomLimits
from env.alfworld.generate import DATA_DIR, GeneratorSettings, generate_dataset
from env.alfworld.prepare import TASK_TYPES, prepare
from env.launch import serving
from evolving_rl.config import Config

logger = logging.getLogger(__name__)


def prepare_data(cfg: Config) -> None:
    """Generate games when the data root has none, then (re)write the prepared splits."""
    root = Path(cfg.alfworld.data_root)
    if not any((root / DATA_DIR).glob("*/*/*/game.tw-pddl")):
        limits = RoomLimits(cfg.alfworld.generator_max_receptacles,
                            cfg.alfworld.generator_max_objects)
        report = generate_dataset(root, cfg.local.games_per_type, seed=cfg.run.seed,
                                  workers=cfg.local.generator_workers,
                                  settings=GeneratorSettings(limits=limits),
                                  task_types=cfg.alfworld.generator_task_types or TASK_TYPES)
        logger.info("generated games per split %s in %.0fs (%d missing)",
                    report.games_per_split, report.wall_seconds, report.missing)
    manifest = prepare(root, cfg.alfworld.prepared_dir)
    logger.info("prepared splits: %s", {k: v["games"] for k, v in manifest["splits"].items()})


def serve(cfg: Config) -> contextlib.AbstractContextManager[None]:
    """The ALFWorld router + workers of `cfg` for the duration of the block."""
    return serving(cfg, launch.start, launch.stop)


def ports(cfg: Config) -> dict[str, tuple[str, int, int]]:
    """config key -> (host, first port, how many consecutive ports): the router, the workers."""
    alf = cfg.alfworld
    return {"alfworld.port": (alf.host, alf.port, 1),
            "alfworld.worker_base_port": (alf.host, alf.worker_base_port, alf.n_workers)}
