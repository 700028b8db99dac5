"""The domain registry: every environment the trainer runs, by its config name.

`domain_for(cfg)` is how the pipeline context, the local job and the slime bridge find the
configured environment; an `environment` with no entry here fails at startup with a
`ConfigError` naming the registered ones. To add an environment `<name>`, provide:

- its config section `<name>` (`config/schema.py`, with the `environment` literal), holding at
  least `prepared_dir`: the folder of its prepared `<split>.jsonl` files, rows of the shape
  `retrieval.prepared` reads (`id`, `question`, `prompt`, `metadata.task_type`; retrieval, the
  task catalog, the local job and slime's data source read them unchanged), plus its server's
  address;
- its adapter, `domains/<name>.py`: an `EnvironmentAdapter` (`domains/base.py`) and its entry
  `DOMAIN = Domain(...)`: `name`, `adapter(cfg, lenient)` (a new adapter; `lenient` action
  parsing for small models), `env_url(cfg)` (its env server's base URL), `eval_split` (the
  held-out split the local job evaluates on), `eval_splits` (those a checkpoint evaluation
  covers), `prepare_command` (what a user runs to prepare its data), `invalid_actions` (what
  `rewards.invalid_action_penalty` counts, in a report's words) and `services` (the dotted name
  of its server-side module);
- that server-side module (`env/<name>/...`) with `prepare_data(cfg)` (write the prepared splits
  into `prepared_dir`, generating or fetching data when needed; the local job's first stage) and
  `serve(cfg)` (a context manager running its env servers for the block and stopping them, by
  PID, on any exit). Only `local.servers` imports it (for the local job, its comparison and
  checkpoint evaluation): `domains` sits beside `env` and never imports it
  (`tests/test_import_graph.py`);
- one line in `DOMAINS` below.
"""

from __future__ import annotations

from evolving_rl.config import Config, ConfigError
from evolving_rl.domains import alfworld, mind2web, probe
from evolving_rl.domains.base import Domain

DOMAINS: dict[str, Domain] = {domain.name: domain for domain in (
    alfworld.DOMAIN,
    mind2web.DOMAIN,
    probe.DOMAIN,
)}


def domain_for(cfg: Config) -> Domain:
    """The configured environment's entry; `ConfigError` on `environment` when none is."""
    domain = DOMAINS.get(cfg.environment)
    if domain is None:
        raise ConfigError("environment", f"{cfg.environment!r} has no registered domain "
                          f"(registered: {', '.join(sorted(DOMAINS))}; see "
                          "evolving_rl/domains/registry.py)")
    return domain
