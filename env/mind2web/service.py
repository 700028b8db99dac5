"""What the local main job needs from the Mind2Web server side: Mind2Web's `Domain.services`.

Owns `prepare_data(cfg)`: when `mind2web.data_root` holds no task file and no test zip (in
either layout of `env.mind2web.prepare`), generate a small synthetic set
in the official layout (`generate`, seeded by `run.seed`), then (re)write the prepared splits
with `prepare` (the test zip's password: the generator's for generated data, else
$MIND2WEB_ZIP_PASSWORD); and `serve(cfg)`: the env server of `launch` for the duration of a
block, stopped on any exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from env.launch import serving
from env.mind2web import launch
from env.mind2web.generate import DEFAULT_PASSWORD, GENERATED_MARKER, GenerateSpec, generate
from env.mind2web.prepare import prepare, source_files
from env.mind2web.testzip import PASSWORD_ENV, find_test_zips
from evolving_rl.config import Config

logger = logging.getLogger(__name__)


def prepare_data(cfg: Config) -> None:
    """Generate a synthetic set when the data root has none, then (re)write the splits."""
    root = Path(cfg.mind2web.data_root)
    data = root / "data"
    if not any(source_files(root).values()) and not find_test_zips(root):
        generated = generate(cfg.mind2web.data_root, GenerateSpec(seed=cfg.run.seed))
        logger.info("generated synthetic Mind2Web tasks: %s", generated.counts)
    generated_here = (data / GENERATED_MARKER).is_file()
    password = DEFAULT_PASSWORD if generated_here else os.environ.get(PASSWORD_ENV)
    manifest = prepare(cfg.mind2web.data_root, cfg.mind2web.prepared_dir, password)
    logger.info("prepared splits: %s", sorted(manifest["splits"]))


def serve(cfg: Config) -> contextlib.AbstractContextManager[None]:
    """The Mind2Web env server of `cfg` for the duration of the block."""
    return serving(cfg, launch.start, launch.stop)
