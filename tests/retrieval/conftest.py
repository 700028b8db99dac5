"""Session fixtures for the retrieval tests: synthetic prepared splits, the real MiniLM model
(offline, loaded once in-process), a cache built once, and a real server subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest
from retrieval_helpers import N_TASKS, write_config

from env.retrieval.launcher import RetrievalServer, start_retrieval_server, stop_retrieval_server
from evolving_rl.config import Config, load_config
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.cache import EmbeddingCache, load_cache
from evolving_rl.retrieval.encoder import Encoder, load_encoder
from tests.fakes.synthetic_tasks import write_prepared_splits


@pytest.fixture(scope="session")
def make_config():
    """`make_config(folder, prepared_dir, **retrieval_keys)` → path of a config file."""
    return write_config


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("prepared")
    write_prepared_splits(folder, N_TASKS, seed=0)
    return folder


@pytest.fixture(scope="session")
def config_path(tmp_path_factory, prepared_dir) -> Path:
    return write_config(tmp_path_factory.mktemp("retrieval"), prepared_dir)


@pytest.fixture(scope="session")
def config(config_path) -> Config:
    return load_config(config_path)


@pytest.fixture(scope="session")
def encoder(config) -> Encoder:
    return load_encoder(config.retrieval)


@pytest.fixture(scope="session")
def cache(config, encoder) -> EmbeddingCache:
    refresh_cache(config, encoder, show_progress=False)
    return load_cache(config.retrieval.cache_path)


@pytest.fixture(scope="session")
def server(config, cache) -> RetrievalServer:
    handle = start_retrieval_server(config)
    yield handle
    assert stop_retrieval_server(config)
    assert handle.proc.wait(10) == 0
    assert not handle.pid_file.exists()
