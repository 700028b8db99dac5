"""The expensive, once-per-game part of loading an ALFWorld game: grammar parse + PDDL→SAS.

Owns `compile_game`, which a worker runs in its translator process (so a cold reset never holds
the worker's engine lock or its GIL), and `CompiledGame`, the plain picklable result that the
worker caches per game. Stock TextWorld pays this on every load and reset: the game grammar parse
(tatsu) once per load and the translation twice per load and twice per reset (a plain and
an optimised one for re-planning, which a server never asks for).

Fast Downward's translator is not thread-safe: it rewrites `sys.argv`, its global `options` and
`sys.stdout` while it runs; `compile_game` restores `sys.argv` and must run one at a time per
process (the translator process runs one job at a time).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fast_downward
import textworld
from textworld.envs.pddl import logic as pddl_logic

from env.alfworld.runtime import DownwardLib, Fact, GameRuntime, to_fact

TEMPLATE_PREDICATE = re.compile(r"(\w+)\(")


@dataclass(frozen=True)
class CompiledGame:
    """One game, translated: what a worker needs to start episodes without re-translating."""

    key: str
    task_type: str
    sas: bytes
    logic_pickle: bytes
    params: dict[str, tuple[tuple[str, str], ...]]
    name2type: dict[str, str]
    facts: tuple[Fact, ...]
    commands_static: bool

    def runtime(self, lib: DownwardLib) -> GameRuntime:
        """Build the per-game runtime (uses `lib`; call under the engine lock)."""
        lib.hold(self, self.sas)
        facts = list(self.facts)
        for atom in lib.atoms():
            prop = atom.get_fact(self.name2type)
            if not prop.is_negation:
                facts.append(to_fact(prop))
        return GameRuntime.build(self.key, self.sas, self.logic_pickle, self.params,
                                 self.name2type, facts, self.commands_static)


def watch_parent(parent_pid: int, period_s: float = 0.5) -> None:
    """Translator-process initializer: exit as soon as the worker that started us is gone
    (a killed worker must not leave its translator behind)."""

    def _watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os._exit(0)

    threading.Thread(target=_watch, daemon=True, name="watch-parent").start()


@contextlib.contextmanager
def argv_kept() -> Iterator[None]:
    """Fast Downward's translator overwrites `sys.argv`; put it back."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


def _init_fact(atom, name2type: dict[str, str]) -> Fact | None:
    """`PddlState`'s conversion of one initial PDDL atom (distances and costs dropped)."""
    translate = fast_downward.translate.pddl
    if isinstance(atom, translate.conditions.Atom):
        if atom.predicate == "=":
            return None
        return atom.predicate, tuple((arg, name2type[arg]) for arg in atom.args)
    if isinstance(atom, translate.f_expression.Assign):
        if atom.fluent.symbol == "total-cost" or str(atom.expression.value).isdigit():
            return None
        return str(atom.expression.value), tuple((a, name2type[a]) for a in atom.fluent.args)
    return None


def _commands_static(task, logic: pddl_logic.GameLogic) -> bool:
    """True when no command template queries a predicate that any action changes."""
    fluents = {effect.literal.predicate.lower() for action in task.actions
               for effect in action.effects}
    queried = {name.lower() for action in logic.actions.values()
               for name in TEMPLATE_PREDICATE.findall(action.template)}
    return not (queried & fluents)


def compile_game(path: str, key: str, task_type: str) -> CompiledGame:
    """Parse the grammar and translate `path` (a validated game.tw-pddl) once."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    logic = pddl_logic.GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
    with argv_kept():
        task, sas = fast_downward.pddl2sas(logic.domain, data["pddl_problem"])
    for type_ in task.types:
        with contextlib.suppress(ValueError):  # already known, as in PddlState
            logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
    name2type = {o.name: o.type_name for o in task.objects}
    facts = tuple(f for f in (_init_fact(a, name2type) for a in task.init) if f is not None)
    params = {a.name: tuple((p.name, p.type_name) for p in a.parameters) for a in task.actions}
    return CompiledGame(key=key, task_type=task_type, sas=sas.encode("utf-8"),
                        logic_pickle=pickle.dumps(logic), params=params, name2type=name2type,
                        facts=facts, commands_static=_commands_static(task, logic))
