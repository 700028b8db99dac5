"""Typed configuration: the schema, and loading it from YAML with validation at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from evolving_rl.config.loader import ConfigError, from_dict, to_dict
from evolving_rl.config.schema import Config

__all__ = ["Config", "ConfigError", "load_config", "parse_config", "to_dict"]


def _apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one `dotted.key=value` override (value parsed as YAML)."""
    if "=" not in override:
        raise ConfigError(override, "override must look like key.path=value")
    key, raw = override.split("=", 1)
    node = data
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(key, f"'{part}' is not a section")
    node[parts[-1]] = yaml.safe_load(raw)


def _set_key(override: str) -> str:
    return override.split("=", 1)[0].strip()


def value_source(key: str, overrides: tuple[str, ...] | list[str],
                 source: str | Path | None) -> str | Path | None:
    """Where the value of `key` came from: the last `--set` of it, of a section holding it or of
    a key inside it (an unknown section that `--set foo.bar=1` made is named as that `--set`),
    else the file."""
    for override in reversed(overrides):
        set_key = _set_key(override)
        if (key in (set_key, override) or key.startswith((f"{set_key}.", f"{set_key}["))
                or set_key.startswith(f"{key}.")):
            return f"--set {override}"
    return source


def parse_config(data: Any, source: str | Path | None = None,
                 overrides: tuple[str, ...] | list[str] = ()) -> Config:
    """Validate plain data (e.g. parsed YAML) into a `Config`; errors name the key and where its
    value came from (`--set KEY=VALUE` or the source file)."""
    data = dict(data or {})
    try:
        for override in overrides:
            _apply_override(data, override)
        return from_dict(Config, data)
    except ConfigError as err:
        raise ConfigError(err.key, err.message, value_source(err.key, overrides, source)) from None


def load_config(path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> Config:
    """Load and validate a YAML config file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("", f"no config file {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError("", f"invalid YAML in config file {path}: {err}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError("", f"config file {path}: the top level must be a mapping")
    return parse_config(data, path, overrides)
