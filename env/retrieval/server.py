"""Retrieval server process: load config, cache and model, then serve with waitress.

    python -m env.retrieval --config configs/local_cpu.yaml [--host H] [--port N] [--set k=v]

Owns start-up order and refusal: the cache is read first and its model compared with the
configured one before the model is loaded, so a cache built with another model (or holding a
question longer than `retrieval.max_query_chars`, which no client could then send) stops the
process with a clear message and exit code 2. Writes `<log_dir>/retrieval-<port>.pid` and logs
to `<log_dir>/retrieval-<port>.log`; SIGTERM shuts down cleanly: the encoder first refuses every
batch not started (`Encoder.stop`: a request waiting for the model, or with batches left, is
answered 503 `stopping` at once; one whose last batch runs gets its result), so that every
request received is answered within the stop's grace (`env.http_server.Server.serve`); then it
closes the encoder, waiting for the batch it runs (the interpreter must not exit under a thread
in native code, which aborts the process), and removes the PID file.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from env.http_server import make_server
from env.launch import add_config_arguments, config_from_args, write_pid_file
from env.retrieval.app import create_app
from evolving_rl.config import ConfigError
from evolving_rl.config.schema import RetrievalConfig
from evolving_rl.retrieval.cache import CacheError, load_cache
from evolving_rl.retrieval.encoder import Encoder, ModelLoadError, load_encoder, resolve_model
from evolving_rl.retrieval.index import SearchIndex

logger = logging.getLogger(__name__)


class ModelMismatchError(RuntimeError):
    """The cache was built with another model than the one configured."""


def pid_file(cfg: RetrievalConfig) -> Path:
    return Path(cfg.log_dir) / f"retrieval-{cfg.port}.pid"


def log_file(cfg: RetrievalConfig) -> Path:
    return Path(cfg.log_dir) / f"retrieval-{cfg.port}.log"


def load_index_and_encoder(cfg: RetrievalConfig) -> tuple[SearchIndex, Encoder]:
    """Read the cache, check it fits the configured model, then load the model."""
    cache = load_cache(cfg.cache_path)
    longest = max(cache.rows, key=lambda row: len(row.question), default=None)
    if longest is not None and len(longest.question) > cfg.max_query_chars:
        raise ConfigError("retrieval.max_query_chars", f"task {longest.id} of cache "
                          f"{cfg.cache_path} has a question of {len(longest.question)} "
                          f"characters, over retrieval.max_query_chars={cfg.max_query_chars}: "
                          "no client could send it; raise the setting")
    spec = resolve_model(cfg.model)
    if cache.model != spec.name:
        raise ModelMismatchError(
            f"cache {cfg.cache_path} was built with model '{cache.model}' but the server is "
            f"configured with '{spec.name}' (retrieval.model={cfg.model}); rebuild the cache "
            f"with this config or point retrieval.cache_path at a cache of this model")
    encoder = load_encoder(cfg)
    if encoder.dimension != cache.dimension:
        raise ModelMismatchError(f"cache {cfg.cache_path} holds {cache.dimension}-d vectors; "
                                 f"model '{spec.name}' makes {encoder.dimension}-d vectors")
    return SearchIndex(cache), encoder


def _setup_logging(cfg: RetrievalConfig) -> None:
    log_path = log_file(cfg)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=[logging.StreamHandler(), logging.FileHandler(log_path)])


def _parse_config(argv: list[str] | None) -> RetrievalConfig:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(parser)
    parser.add_argument("--host", help="override retrieval.host")
    parser.add_argument("--port", type=int, help="override retrieval.port")
    args = parser.parse_args(argv)
    overrides = []
    if args.host is not None:
        overrides.append(f"retrieval.host={args.host}")
    if args.port is not None:
        overrides.append(f"retrieval.port={args.port}")
    return config_from_args(args, overrides).retrieval


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = _parse_config(argv)
    except ConfigError as err:
        logging.basicConfig()
        logger.error("%s", err)
        return 2
    _setup_logging(cfg)
    try:
        index, encoder = load_index_and_encoder(cfg)
    except (CacheError, ConfigError, ModelLoadError, ModelMismatchError) as err:
        logger.error("refusing to start: %s", err)
        return 2
    app = create_app(index, encoder, cfg)
    try:
        server = make_server(app, host=cfg.host, port=cfg.port, threads=cfg.threads,
                             max_body_bytes=cfg.max_body_bytes, ident="retrieval")
    except OSError as err:
        logger.error("cannot listen on %s:%d: %s", cfg.host, cfg.port, err)
        return 2
    write_pid_file(pid_file(cfg))
    logger.info("serving %d tasks (%s, %d-d) on http://%s:%d with %d threads; config %s",
                index.size, index.model, index.dimension, cfg.host, cfg.port,
                cfg.threads, dataclasses.asdict(cfg))
    server.serve(on_stop=encoder.stop)
    logger.info("closing the encoder (waiting for the batch it encodes, if any)")
    encoder.close()
    logger.info("retrieval server on port %d stopped", cfg.port)
    return 0
