"""Command line: build or refresh the embedding cache of the configured environment's tasks.

    python -m evolving_rl.retrieval.build --config configs/local_cpu.yaml [--splits train ...]

Reads `<prepared_dir>/<split>.jsonl` through `retrieval.prepared` (all splits found unless
`--splits`), embeds the task questions with `retrieval.model` (batch size, device and threads
from the config), reuses the vectors of unchanged texts from an existing cache of the same model,
and saves `retrieval.cache_path` atomically. `cache_is_current` tells a job that the cache already
holds every row with the configured model (nothing to load, encode or write). A caller that has
read the rows already passes them (`rows`): the files are then not read again.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from evolving_rl.config import Config, ConfigError, load_config
from evolving_rl.retrieval.cache import BuildStats, CacheError, build_cache, load_cache, save_cache
from evolving_rl.retrieval.encoder import Encoder, ModelLoadError, load_encoder, resolve_model
from evolving_rl.retrieval.prepared import PreparedDataError, prepared_dir_for
from evolving_rl.retrieval.tasks import TaskRow, load_task_rows

logger = logging.getLogger(__name__)


def _rows(cfg: Config, splits: list[str] | None, rows: list[TaskRow] | None) -> list[TaskRow]:
    return rows if rows is not None else load_task_rows(prepared_dir_for(cfg), splits)


def refresh_cache(cfg: Config, encoder: Encoder, splits: list[str] | None = None,
                  show_progress: bool = True, rows: list[TaskRow] | None = None) -> BuildStats:
    """Build `cfg.retrieval.cache_path` from the prepared splits (or `rows`, read from them),
    reusing what is unchanged."""
    rows = _rows(cfg, splits, rows)
    cache_path = Path(cfg.retrieval.cache_path)
    previous = None
    if cache_path.is_file():
        try:
            previous = load_cache(cache_path)
        except CacheError as err:
            logger.warning("ignoring the existing cache: %s", err)
    cache, stats = build_cache(rows, encoder, previous, show_progress=show_progress)
    save_cache(cache, cache_path)
    return stats


def cache_is_current(cfg: Config, splits: list[str] | None = None,
                     rows: list[TaskRow] | None = None) -> bool:
    """Whether `retrieval.cache_path` already holds exactly the rows of the prepared splits (or
    `rows`), embedded by the configured model: then there is nothing to encode or write, and the
    encoder need not be loaded."""
    cache_path = Path(cfg.retrieval.cache_path)
    if not cache_path.is_file():
        return False
    try:
        cached = load_cache(cache_path)
        model = resolve_model(cfg.retrieval.model).name
    except (CacheError, ModelLoadError):
        return False
    return cached.model == model and cached.rows == tuple(_rows(cfg, splits, rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config (configs/*.yaml)")
    parser.add_argument("--splits", nargs="+", help="split names (default: every split file)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (retrieval.device=cpu)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config, args.overrides)
        encoder = load_encoder(cfg.retrieval)
        stats = refresh_cache(cfg, encoder, args.splits)
    except (ConfigError, ModelLoadError, PreparedDataError, CacheError) as err:
        logger.error("%s", err)
        return 2
    logger.info("cache %s: %d rows, %d unique texts, %d encoded, %d reused",
                cfg.retrieval.cache_path, stats.n_rows, stats.n_unique_texts, stats.n_encoded,
                stats.n_reused)
    return 0


if __name__ == "__main__":
    sys.exit(main())
