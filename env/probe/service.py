"""What the local main job needs from the probe's server side: the probe's `Domain.services`.

Owns `prepare_data(cfg)`, which writes the prepared splits (`train`, `valid`:
`<prepared_dir>/<split>.jsonl`, generated from `probe.seed`; atomic, rewritten only when they
change) and `serve(cfg)`: the env server of `launch` for the duration of a block, stopped on any
exit. Also the command line of the slime launcher's data step:

    python -m env.probe.service --config configs/probe_stated_1gpu.yaml
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from pathlib import Path

from env.launch import add_config_arguments, config_from_args, serving
from env.probe import launch
from evolving_rl.config import Config
from evolving_rl.domains.probe_tasks import SPLITS, split_rows

logger = logging.getLogger(__name__)


def prepare_data(cfg: Config) -> None:
    """(Re)write the prepared splits of `cfg.probe` where they differ from what is there."""
    folder = Path(cfg.probe.prepared_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        text = "".join(json.dumps(row) + "\n" for row in split_rows(cfg.probe, split))
        path = folder / f"{split}.jsonl"
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        staging = path.with_name(path.name + ".tmp")
        staging.write_text(text, encoding="utf-8")
        staging.replace(path)
    logger.info("prepared %s probe splits in %s", cfg.probe.kind, folder)


def serve(cfg: Config) -> contextlib.AbstractContextManager[None]:
    """The probe env server of `cfg` for the duration of the block."""
    return serving(cfg, launch.start, launch.stop)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    prepare_data(config_from_args(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
