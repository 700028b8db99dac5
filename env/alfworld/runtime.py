"""Playing ALFWorld games in the real TextWorld PDDL engine, many episodes on one Fast Downward lib.

Owns the engine mechanics below the servers. Stock TextWorld (`PddlEnv`) gives each environment
its own copy of `libdownward.so` (a file copy per environment, never unloaded: what a plain
worker leaks per episode), re-translates PDDL→SAS on every load *and* reset, re-parses the
game grammar on every load, and re-derives every admissible command through the grammar on every
step. Here:

- one `DownwardLib` per process serves every game: a reset loads the game's SAS into it, and the
  lib's state registry lets each episode keep its own state id; when the lib last held another
  game, the episode's operator history is replayed (C calls only);
- a `GameRuntime` (built from a `CompiledGame`, see `translation`) holds the per-game grammar,
  initial facts and names, and memoises the text of each operator's command — exact because the
  command templates only read static predicates (checked at compile time, else derived each step);
- an `Episode` mirrors `PddlEnv.step` / `_gather_infos` exactly: same feedback derivation, same
  first-match command lookup, same sorted, de-duplicated admissible commands, "Nothing happens."
  for anything else.

None of this is thread-safe (neither is the stock engine): callers hold one lock per process.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from dataclasses import dataclass, field

import fast_downward
import textworld
from alfworld.agents.utils.misc import Demangler
from textworld.envs.pddl import logic as pddl_logic
from textworld.generator.game import EntityInfo
from textworld.logic import Placeholder, Proposition, State, Variable

from env.alfworld.grammar import memoise

NOTHING_HAPPENS = "Nothing happens."
TASK_PREFIX = "Your task is to: "

Fact = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Operator:
    """One applicable ground operator of the loaded SAS task."""

    id: int
    name: str
    n_effects: int


class DownwardLib:
    """The process's one Fast Downward library instance and which game's SAS it holds."""

    def __init__(self) -> None:
        self._lib = fast_downward.load_lib()
        self._holder: object | None = None
        self.generation = 0
        self.initial_state_id = -1

    def hold(self, holder: object, sas: bytes) -> bool:
        """Make `holder`'s SAS the loaded task; True when it had to be (re)loaded."""
        if self._holder is holder:
            return False
        self._lib.load_sas(sas)
        self._holder = holder
        self.generation += 1
        self.initial_state_id = self.state_id
        return True

    def release(self, holder: object) -> None:
        """Free the C task if `holder` still owns it (its game is being dropped)."""
        if self._holder is holder:
            self._lib.cleanup()
            self._holder = None
            self.generation += 1

    @property
    def state_id(self) -> int:
        return int(self._lib.get_state_id())

    @state_id.setter
    def state_id(self, value: int) -> None:
        self._lib.set_state_id(value)

    def applicable(self) -> list[Operator]:
        count = self._lib.get_applicable_operators_count()
        ops = (fast_downward.Operator * count)()
        self._lib.get_applicable_operators(ops)
        return [Operator(op.id, op.name, op.nb_effect_atoms) for op in ops]

    def apply(self, op: Operator) -> list[pddl_logic.Atom]:
        effects = (pddl_logic.Atom * op.n_effects)()
        self._lib.apply_operator(op.id, effects)
        return list(effects)

    def atoms(self) -> list[pddl_logic.Atom]:
        atoms = (pddl_logic.Atom * self._lib.get_state_size())()
        self._lib.get_state(atoms)
        return list(atoms)

    def goal_reached(self) -> bool:
        return bool(self._lib.check_goal())


def to_fact(prop: Proposition) -> Fact:
    return prop.name, tuple((v.name, v.type) for v in prop.arguments)


def to_prop(fact: Fact) -> Proposition:
    name, args = fact
    return Proposition(name, [Variable(n, t) for n, t in args])


def new_state(logic: pddl_logic.GameLogic, facts: Iterable[Proposition]) -> State:
    """A textworld `State` (what the grammar queries) without PddlState's re-translation."""
    state = State.__new__(State)
    State.__init__(state, textworld.logic.GameLogic())
    state._logic = logic
    state.add_facts(facts)
    return state


def demangled_entities(state: State) -> dict[str, EntityInfo]:
    """`PddlEnv._get_entity_infos` followed by `AlfredDemangler` (no shuffling)."""
    infos = {v.name: EntityInfo(v.name, v.type) for fact in state.facts for v in fact.arguments}
    for info in infos.values():
        info.name, info.definite, info.indefinite = info.id, "the", "a"
    demangler = Demangler(game_infos=infos, shuffle=False)
    for info in infos.values():
        info.name = demangler.demangle_alfred_name(info.id)
    return infos


@dataclass
class GameRuntime:
    """Everything per game that episodes share: grammar, SAS, initial facts, command texts."""

    key: str
    sas: bytes
    logic: pddl_logic.GameLogic
    params: dict[str, tuple[tuple[str, str], ...]]
    name2type: dict[str, str]
    initial_facts: tuple[Proposition, ...]
    commands_static: bool
    intro: str = ""
    entities: dict[str, EntityInfo] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, key: str, sas: bytes, logic_pickle: bytes,
              params: dict[str, tuple[tuple[str, str], ...]], name2type: dict[str, str],
              facts: Iterable[Fact], commands_static: bool) -> GameRuntime:
        return cls(key, sas, memoise(pickle.loads(logic_pickle)), params, name2type,
                   tuple(to_prop(f) for f in facts), commands_static)

    def __post_init__(self) -> None:
        self.entities = demangled_entities(new_state(self.logic, self.initial_facts))

    def mapping(self, op_name: str) -> dict[Placeholder, Variable]:
        name, *args = op_name.split()
        return {Placeholder(p.strip("?"), t): Variable(arg, t)
                for (p, t), arg in zip(self.params[name], args, strict=False)}

    def context(self, state: State, mapping: dict[Placeholder, Variable]) -> dict:
        return {"state": state, "facts": list(state.facts),
                "variables": {ph.name: self.entities[var.name] for ph, var in mapping.items()},
                "mapping": mapping, "entity_infos": self.entities}

    def command(self, op_name: str, state: State) -> str:
        """The command text of an operator, derived as `PddlEnv._gather_infos` does."""
        text = self.commands.get(op_name)
        if text is not None:
            return text
        mapping = self.mapping(op_name)
        template = self.logic.actions[op_name.split()[0]].template
        action = textworld.logic.Action(name=op_name, preconditions=[], postconditions=[])
        action.command_template = self.logic.grammar.derive(template, self.context(state, mapping))
        text = action.format_command({k: info.name for k, info in self.entities.items()})
        if self.commands_static:
            self.commands[op_name] = text
        return text

    def feedback(self, op_name: str, state: State) -> str:
        rule = self.logic.actions[op_name.split()[0]].feedback_rule
        return self.logic.grammar.derive(rule, self.context(state, self.mapping(op_name)))

    def derive_intro(self, state: State) -> str:
        return self.logic.grammar.derive("#intro#", {
            "state": state, "facts": list(state.facts), "variables": {}, "mapping": {},
            "entity_infos": self.entities})


class Episode:
    """One play-through of a game: its lib state id, operator history and grammar-side facts."""

    def __init__(self, game: GameRuntime, lib: DownwardLib) -> None:
        self.game = game
        self.lib = lib
        self.history: list[Operator] = []
        self.moves = 0
        self.state = new_state(game.logic, game.initial_facts)
        self._state_id = -1
        self._generation = -1
        self._select()
        if not game.intro:
            game.intro = game.derive_intro(self.state)
        self.observation = game.intro
        self.commands: dict[str, Operator] = {}
        self.admissible: list[str] = []
        self.won = False
        self._gather()

    def _select(self) -> None:
        """Point the lib at this episode's state, replaying its history after a reload."""
        self.lib.hold(self.game, self.game.sas)
        if self._generation == self.lib.generation:
            self.lib.state_id = self._state_id
            return
        self.lib.state_id = self.lib.initial_state_id
        for op in self.history:
            self.lib.apply(op)
        self._state_id = self.lib.state_id
        self._generation = self.lib.generation

    def _gather(self) -> None:
        self.won = self.lib.goal_reached()
        commands: dict[str, Operator] = {}
        for op in self.lib.applicable():
            text = self.game.command(op.name, self.state)
            commands.setdefault(text, op)
        self.commands = commands
        self.admissible = sorted(commands)

    @property
    def reward(self) -> float:
        """The stock engine's reward for the last step (`PddlEnv.step` returns its score): 1 once
        the goal is reached, else 0 — ALFWorld games give no intermediate reward."""
        return 1.0 if self.won else 0.0

    def step(self, command: str) -> str:
        """Play one command; returns the feedback text (admissible/won are updated)."""
        self._select()
        op = self.commands.get(command.strip())
        if op is None:
            self.observation = NOTHING_HAPPENS
        else:
            for atom in self.lib.apply(op):
                prop = atom.get_fact(self.game.name2type)
                self.state.remove_fact(prop.negate())
                self.state.add_fact(prop)
            self.history.append(op)
            self._state_id = self.lib.state_id
            self.observation = self.game.feedback(op.name, self.state)
            self.moves += 1
        self._gather()
        return self.observation
