"""The domain registry: each entry provides what its docstring promises, and an environment
with no entry fails at startup (context, local job, slime runtime) naming the registered ones."""

from __future__ import annotations

import asyncio
import importlib
import inspect

import pytest

from evolving_rl.config import ConfigError, parse_config
from evolving_rl.domains import registry
from evolving_rl.domains.alfworld import AlfworldAdapter
from evolving_rl.local.job import run_job
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.retrieval.prepared import prepared_dir_for


@pytest.mark.parametrize("name", sorted(registry.DOMAINS))
def test_every_entry_provides_what_the_registry_promises(name):
    domain = registry.DOMAINS[name]
    cfg = parse_config({"environment": name})
    assert registry.domain_for(cfg) is domain and domain.name == name
    assert domain.adapter(cfg, True).name == name
    assert domain.env_url(cfg).startswith("http://127.0.0.1:")
    assert domain.eval_split and prepared_dir_for(cfg).parts
    services = importlib.import_module(domain.services)
    assert list(inspect.signature(services.prepare_data).parameters) == ["cfg"]
    assert list(inspect.signature(services.serve).parameters) == ["cfg"]


def test_the_alfworld_entry_keeps_its_settings():
    cfg = parse_config({"alfworld": {"port": 8555, "action_format": "number"}})
    adapter = make_adapter(cfg, lenient=True)
    assert isinstance(adapter, AlfworldAdapter) and "number" in adapter.system
    assert registry.domain_for(cfg).env_url(cfg) == "http://127.0.0.1:8555"
    with pytest.raises(ValueError, match="needs lenient"):
        make_adapter(cfg)


@pytest.fixture
def unregistered(monkeypatch):
    """A config whose environment has no entry."""
    monkeypatch.delitem(registry.DOMAINS, "alfworld")
    return parse_config({})


def test_unregistered_environment_fails_naming_the_registered(unregistered):
    with pytest.raises(ConfigError, match="'environment'.*'alfworld' has no registered domain"):
        registry.domain_for(unregistered)


def test_unregistered_environment_fails_before_the_context_opens_anything(unregistered):
    with pytest.raises(ConfigError, match="no registered domain"):
        asyncio.run(build_context(unregistered))  # no policy given: that error would come later


def test_unregistered_environment_fails_before_the_local_job_writes(unregistered, tmp_path):
    cfg = parse_config({"run": {"output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError, match="no registered domain"):
        run_job(cfg)
    assert not (tmp_path / "run").exists()
