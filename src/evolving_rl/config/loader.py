"""Strict mapping of plain YAML data onto typed dataclasses.

Owns the generic part of configuration loading: unknown keys, wrong types and out-of-range
values raise `ConfigError` naming the dotted key and the source file. Range checks are declared
on dataclass fields with `evolving_rl.core.bounds.bounded(...)` metadata; cross-field checks live
in `validate()` methods of the dataclasses themselves, or, for a core settings type the schema
embeds, in its `__post_init__`, whose `FieldError` is reported under that field's key. A class may
name keys it no longer has in a `RENAMED` class variable (old key -> new key): such a key fails
naming the key that holds its setting now; and in a `REMOVED` one (old key -> where its setting
lives now, in words), for a key whose setting moved to another section or merged into another.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from evolving_rl.core.bounds import BOUNDS, FieldError, bound_violation

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing, unknown, mistyped or out of range (`key` empty: the
    message is about the config as a whole, e.g. a missing file)."""

    def __init__(self, key: str, message: str, source: str | Path | None = None) -> None:
        where = f" in {source}" if source else ""
        super().__init__(f"config key '{key}'{where}: {message}" if key else message)
        self.key = key
        self.message = message
        self.source = str(source) if source else None


def _check_bounds(key: str, value: Any, bounds: dict[str, float]) -> None:
    message = bound_violation(value, bounds)
    if message:
        raise ConfigError(key, message)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check `value` against the annotation `tp`, converting where YAML is looser."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                continue
        raise ConfigError(key, f"expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {list(args)}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, prefix=key)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(key, f"expected a list, got {type(value).__name__}")
        item = args[0] if args else Any
        items = [_coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(f"{key}.{k}", v, vt) for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ConfigError(key, f"expected {tp.__name__}, got {value!r}")
        return value
    raise ConfigError(key, f"unsupported annotation {_type_name(tp)}")


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass `cls` from `data`, rejecting unknown keys and bad values."""
    where = prefix or "<root>"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        renamed = getattr(cls, "RENAMED", {}).get(unknown[0])
        if renamed:
            raise ConfigError(key, f"renamed: use '{prefix + '.' if prefix else ''}{renamed}'")
        removed = getattr(cls, "REMOVED", {}).get(unknown[0])
        if removed:
            raise ConfigError(key, f"removed: {removed}")
        raise ConfigError(key, f"unknown key (known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        kwargs[name] = _coerce(key, value, hints[name])
        _check_bounds(key, kwargs[name], fields[name].metadata.get(BOUNDS, {}))
    try:
        obj = cls(**kwargs)
    except TypeError as err:
        raise ConfigError(where, str(err)) from None
    except FieldError as err:  # a core settings type's own check (module docstring)
        raise ConfigError(f"{prefix}.{err.field}" if prefix else err.field, err.message) from None
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError as err:
            raise ConfigError(f"{prefix}.{err.key}" if prefix else err.key, err.message) from None
    return obj


def to_dict(obj: Any) -> Any:
    """Plain-data view of a config dataclass (for logging, YAML and slime's args namespace):
    tuples become lists, as YAML and `parse_config` have them."""
    return dataclasses.asdict(obj, dict_factory=lambda items: {k: _plain(v) for k, v in items})


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, tuple) else value
