"""Every leaf field of the config schema is read by the code: a key either does something or
the loader refuses it (a key that is not in the schema is a load error).

The rule. Sources: every `*.py` and `*.sh` under src/, env/, benchmarks/ and scripts/, except
`src/evolving_rl/config/` (the schema validating itself is no use). A leaf field `Owner.name`
(a field whose type is not a dataclass; `Owner` the dataclass that declares it: for a section
that inherits a core settings type, that type, e.g. `AuditConfig.max_char_run` of `audit`) is
read where a source file
  - in Python, loads the attribute `.name` (`ast.Attribute` in a load context) or calls
    `getattr(obj, "name", ...)` with that constant string;
  - in shell, has `.name` on a line that is not a comment (`load_config(...).alfworld.data_root`
    inside `python -c`).
Setting a key (`--set alfworld.n_workers=4`, a dict handed to `parse_config`) is not a read:
a key that is only ever set is exactly the silently ignored kind this test is for.
When several owners have a field of that name (`host`: ALFWorld, Mind2Web, retrieval), a read
counts for `Owner` only in a file that also names `Owner`, a schema class inheriting it, or an
attribute holding one of them (`Mind2WebConfig` or `.mind2web`; `AuditConfig`, `AuditSettings`
or `.audit`), so one section's use does not vouch for another's.
The rule is by name, not by type: it can only miss an unused field whose name is read for some
other purpose in a file that also names the field's section.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import typing
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evolving_rl.config.schema import Config

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("src", "env", "benchmarks", "scripts")
EXCLUDED = ROOT / "src" / "evolving_rl" / "config"


@dataclass(frozen=True)
class Field:
    owner: type
    name: str

    @property
    def label(self) -> str:
        return f"{self.owner.__name__}.{self.name}"


@dataclass(frozen=True)
class SourceFile:
    path: Path
    reads: frozenset[str]  # attribute names read
    names: frozenset[str]  # every identifier: names, attributes, imported names


def schema_classes(cls: type = Config) -> Iterator[type]:
    """`cls` and every dataclass reachable through its fields, each once."""
    seen: list[type] = []
    pending = [cls]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.append(current)
        pending += [tp for tp in typing.get_type_hints(current).values()
                    if dataclasses.is_dataclass(tp)]
    yield from seen


def declaring_owner(cls: type, name: str) -> type:
    """The class of `cls`'s MRO whose own body declares field `name`."""
    return next(owner for owner in cls.__mro__ if name in vars(owner).get("__annotations__", {}))


def leaf_fields(classes: list[type]) -> list[Field]:
    """Every leaf field once, by its declaring owner (module docstring)."""
    leaves: dict[Field, None] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        leaves.update((Field(declaring_owner(cls, f.name), f.name), None)
                      for f in dataclasses.fields(cls)
                      if not dataclasses.is_dataclass(hints[f.name]))
    return list(leaves)


def holders(classes: list[type]) -> dict[type, set[str]]:
    """Each dataclass's name and the names of the fields that hold it; an inherited core type
    also gets the names of the schema classes that inherit it and of the fields holding those."""
    held: dict[type, set[str]] = defaultdict(set)
    for cls in classes:
        held[cls].add(cls.__name__)
        for name, tp in typing.get_type_hints(cls).items():
            if dataclasses.is_dataclass(tp):
                held[tp].add(name)
    for cls in classes:
        for base in cls.__mro__[1:]:
            if dataclasses.is_dataclass(base):
                held[base] |= {base.__name__} | held[cls]
    return held


def _python_source(path: Path) -> SourceFile:
    reads, names = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
            if isinstance(node.ctx, ast.Load):
                reads.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "getattr" and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            reads.add(node.args[1].value)
    return SourceFile(path, frozenset(reads), frozenset(names))


def _shell_source(path: Path) -> SourceFile:
    code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                     if not line.lstrip().startswith("#"))
    attributes = frozenset(re.findall(r"\.([A-Za-z_]\w*)", code))
    return SourceFile(path, attributes, attributes | frozenset(re.findall(r"\w+", code)))


def source_files() -> list[SourceFile]:
    files = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if EXCLUDED in path.parents or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py":
                files.append(_python_source(path))
            elif path.suffix == ".sh":
                files.append(_shell_source(path))
    return files


def unread_fields(classes: list[type], sources: list[SourceFile]) -> list[str]:
    """Labels of the leaf fields of `classes` that no source reads (rule in the docstring)."""
    owners_by_name: dict[str, set[type]] = defaultdict(set)
    for cls in classes:
        for f in dataclasses.fields(cls):
            owners_by_name[f.name].add(declaring_owner(cls, f.name))
    held = holders(classes)
    unread = []
    for leaf in leaf_fields(classes):
        shared = len(owners_by_name[leaf.name]) > 1
        readers = [s for s in sources if leaf.name in s.reads
                   and (not shared or s.names & held[leaf.owner])]
        if not readers:
            unread.append(leaf.label)
    return unread


def test_every_schema_field_is_read_outside_config() -> None:
    classes = list(schema_classes())
    assert len(leaf_fields(classes)) > 100  # the walk reached every section
    assert unread_fields(classes, source_files()) == []


@dataclass(frozen=True)
class _ProbeCoreSettings:
    inherited_never_read: int = 0


@dataclass(frozen=True)
class _ProbeSection(_ProbeCoreSettings):
    host: str = ""
    never_read_anywhere: int = 0


@dataclass(frozen=True)
class _ProbeRoot:
    probe_section: _ProbeSection = dataclasses.field(default_factory=_ProbeSection)
    config: Config = dataclasses.field(default_factory=Config)


def test_the_rule_finds_an_unread_field() -> None:
    """A field nobody reads is found, so is one whose name only another section reads, and an
    inherited one under the type that declares it."""
    unread = unread_fields(list(schema_classes(_ProbeRoot)), source_files())
    assert {label for label in unread if label.startswith("_Probe")} == {
        "_ProbeSection.host", "_ProbeSection.never_read_anywhere",
        "_ProbeCoreSettings.inherited_never_read"}


def test_the_audit_section_is_checked_by_its_core_owner() -> None:
    labels = {leaf.label for leaf in leaf_fields(list(schema_classes()))}
    assert {"AuditConfig.max_char_run", "AuditSettings.enabled"} <= labels
    assert "AuditSettings.max_char_run" not in labels
