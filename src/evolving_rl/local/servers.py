"""The servers a one-machine run starts itself, and the retrieval cache they serve.

Owns the server lifecycle that the local main job (`local.job`), its comparison launcher
(`local.experiments.compare`) and checkpoint evaluation (`evaluate.runner`, with
`--start-servers`) share: `env_services` (the configured environment's server-side module:
`prepare_data(cfg)` and `serve(cfg)`, `domains.registry`), `build_retrieval_cache` (embed the
prepared tasks unless the cache already holds them, embedded by the configured model) and
`servers` (the retrieval server and the environment's servers for the duration of a block,
started with the run's `Config` through their launchers and stopped on any exit).

This is the one module of the package that starts `env` servers: `env` sits above `domains`,
beside `pipeline` (docs/design.md §1), so the environment's module is imported here by the name
its registry entry gives. The slime path starts its servers from the shell scripts instead.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from types import ModuleType

from evolving_rl.config.schema import Config
from evolving_rl.domains.registry import domain_for
from evolving_rl.retrieval.prepared import PreparedData, prepared_dir_for, read_prepared_dir
from evolving_rl.retrieval.tasks import task_rows

logger = logging.getLogger(__name__)


def env_services(cfg: Config) -> ModuleType:
    """The environment's server-side module (`prepare_data`, `serve`: see `domains.registry`)."""
    return importlib.import_module(domain_for(cfg).services)


def build_retrieval_cache(cfg: Config, prepared: PreparedData | None = None) -> None:
    """Embed the prepared tasks (read here once, or `prepared.indexed`) into
    `retrieval.cache_path`, unless it is current (same tasks, same model:
    `retrieval.build.cache_is_current`)."""
    from evolving_rl.retrieval.build import cache_is_current, refresh_cache
    from evolving_rl.retrieval.encoder import load_encoder

    rows = task_rows(prepared.indexed if prepared else read_prepared_dir(prepared_dir_for(cfg)))
    if cache_is_current(cfg, rows=rows):
        logger.info("retrieval cache %s is current (same tasks, same model): reused",
                    cfg.retrieval.cache_path)
        return
    stats = refresh_cache(cfg, load_encoder(cfg.retrieval), rows=rows)
    logger.info("retrieval cache %s: %d rows, %d encoded", cfg.retrieval.cache_path,
                stats.n_rows, stats.n_encoded)


@contextlib.contextmanager
def servers(cfg: Config) -> Iterator[None]:
    """Retrieval and environment servers for the duration of the block; stopped on any exit
    (SIGTERM included: `env.launch.stopped_on_sigterm`), and by the kernel if this process is
    killed outright (`env.launch.tied_to_this_process`)."""
    from env.launch import stopped_on_sigterm, tied_to_this_process
    from env.retrieval.launcher import start_retrieval_server

    with contextlib.ExitStack() as stack:
        stack.enter_context(stopped_on_sigterm())
        stack.enter_context(tied_to_this_process())
        stack.callback(start_retrieval_server(cfg).stop)
        stack.enter_context(env_services(cfg).serve(cfg))
        yield
