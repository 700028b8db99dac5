"""TextWorld's context-sensitive grammar, with its per-call parsing memoised per game.

Owns `memoise(logic)`: stock `ContextSensitiveGrammar.derive` re-parses its start string with
tatsu on every call, `replace` re-parses every rule condition, and `ConditionalSymbol.derive`
re-parses its query — about half of a stock step. The classes below are the stock methods
(textworld 1.7.0, `textworld/envs/pddl/textgen/__init__.py`) with those parses cached in the
grammar instance; derivation order, contexts and results are unchanged (tests compare every
observation and command list with the stock engine).
"""

from __future__ import annotations

from copy import deepcopy

from textworld.envs.pddl import logic as pddl_logic
from textworld.envs.pddl import textgen
from textworld.logic import Rule


class MemoConditionalSymbol(textgen.ConditionalSymbol):
    """`ConditionalSymbol` whose `given` query is parsed once (cache shared by its grammar)."""

    queries: dict[str, Rule]

    def __deepcopy__(self, memo):
        """Copy as stock does, but share the grammar's query cache instead of copying it."""
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            setattr(clone, key, value if key == "queries" else deepcopy(value, memo))
        return clone

    def derive(self):
        if len(self.context) == 0:
            raise ValueError("Empty context")
        context = textgen.copy_context(self.context)
        contexts = [context]
        if self.given:
            rule = self.queries.get(self.given)
            if rule is None:
                rule = self.queries[self.given] = Rule.parse_conjunctive_query(self.given)
            contexts = []
            for mapping in context["state"].all_assignments(rule, context["mapping"]):
                context_ = textgen.copy_context(context)
                context_["variables"].update(
                    {ph.name: context_["entity_infos"][var.name] for ph, var in mapping.items()})
                context_["mapping"].update(mapping)
                contexts.append(context_)
        return [self.expression.copy(context) for context in contexts]


class MemoGrammar(textgen.ContextSensitiveGrammar):
    """`ContextSensitiveGrammar` with parsed start strings and conditions cached."""

    def _memo_init(self) -> None:
        self.symbols: dict[str, list] = {}
        self.queries: dict[str, Rule] = {}
        for rules in self._rules.values():
            for rule in rules:
                self._adopt(rule.rhs)

    def _adopt(self, symbols) -> None:
        """Swap in `MemoConditionalSymbol`, recursively (lists nest conditionals)."""
        for symbol in symbols:
            inner = symbol
            while isinstance(inner, textgen.ListSymbol):
                inner = inner.symbol
            if type(inner) is textgen.ConditionalSymbol:
                inner.__class__ = MemoConditionalSymbol
            if isinstance(inner, MemoConditionalSymbol):
                inner.queries = self.queries

    def _query(self, text: str) -> Rule:
        rule = self.queries.get(text)
        if rule is None:
            rule = self.queries[text] = Rule.parse_conjunctive_query(text)
        return rule

    def replace(self, start):
        rules = self._rules.get(str(start))
        if not rules:
            raise textgen.CSGUnknownSymbolError(start)

        def _applicable(rule):
            if not rule.condition:
                return True
            query = self._query(rule.condition)
            return len(list(start.context["state"].all_assignments(
                query, start.context["mapping"]))) > 0

        rules = list(filter(_applicable, rules))
        symbols = deepcopy(rules[0].rhs)
        for symbol in symbols:
            symbol.context = textgen.copy_context(start.context)
        return symbols

    def derive(self, start: str, context={}) -> str:  # noqa: B006 (stock signature)
        parsed = self.symbols.get(start)
        if parsed is None:
            parsed = textgen._parse_and_convert(start, rule_name="symbols")
            self._adopt(parsed)
            self.symbols[start] = parsed
        derivation = deepcopy(parsed)[::-1]
        for symbol in derivation:
            symbol.context = textgen.copy_context(context)
        derived = []
        while derivation:
            symbol = derivation.pop()
            if isinstance(symbol, textgen.TerminalSymbol):
                derived.append(symbol)
            elif isinstance(symbol, textgen.NonterminalSymbol):
                derivation += self.replace(symbol)[::-1]
            elif isinstance(symbol, (textgen.ConditionalSymbol, textgen.EvalSymbol,
                                     textgen.ListSymbol)):
                derivation += symbol.derive()[::-1]
            else:
                raise NotImplementedError(f"Unknown symbol: {type(symbol)}")
        return "".join(map(str, derived))


def memoise(logic: pddl_logic.GameLogic) -> pddl_logic.GameLogic:
    """Turn `logic.grammar` (a fresh, unshared instance) into a `MemoGrammar` in place."""
    logic.grammar.__class__ = MemoGrammar
    logic.grammar._memo_init()
    return logic
