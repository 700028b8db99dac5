"""Why each package is in a pip resolution, and what the installed packages gave it.

scripts/lib/slime_wheelhouse.py reads pip's `--report` with this module. Walking the report's
`install` list from the requested items (breadth first, so each chain is a shortest one) through
each item's `requires_dist`, evaluated with the report's own marker environment and the extras
asked of it, gives:
- `why`: for each package to install, the chain of requirers that pulls it in, e.g.
  "evolving_rl[alfworld] > textworld" ("requested" for the requested items themselves). An
  extra that requires its own package's other extras (evolving_rl[alfworld] asks
  evolving_rl[serve]) is followed inside that package: flask's chain is "evolving_rl[serve]".
- `provided`: the requirements of those packages that an installed package met instead (the
  target image, the slime wheelhouse), with the chain of the first requirer. pip does not look
  into what installed packages require, so neither does this walk.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from packaging.requirements import Requirement

logger = logging.getLogger("wheel_closure")

REQUESTED = "requested"


def canonical(name: str) -> str:
    """PEP 503's normalised name: lower case, runs of `-_.` as one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Closure:
    """`why` of each package to install; `provided`: name -> chain, met by an installed one."""

    why: dict[str, str]
    provided: dict[str, str]


def _applies(requirement: Requirement, environment: dict[str, str], extra: str) -> bool:
    if requirement.marker is None:
        return extra == ""
    return requirement.marker.evaluate({**environment, "extra": extra})


def _own_extras(name: str, requires: list[Requirement], asked: set[str],
                environment: dict[str, str]) -> list[str]:
    """`asked` and the extras of `name` they require of `name` itself, in discovery order."""
    extras = sorted(asked)
    for extra in extras:  # grows while iterating: a breadth-first closure
        for requirement in requires:
            if canonical(requirement.name) == name and _applies(requirement, environment, extra):
                extras += [e for e in sorted(requirement.extras) if e not in extras]
    return extras


def requirements_of(item: dict, asked: set[str],
                    environment: dict[str, str]) -> Iterator[tuple[Requirement, str]]:
    """(requirement, label of the requirer) of a report item with extras `asked`; the label is
    "name" for its base requirements, "name[extra]" for those of an extra."""
    name = canonical(item["metadata"]["name"])
    requires = [Requirement(line) for line in item["metadata"].get("requires_dist", [])]
    for extra in ["", *_own_extras(name, requires, asked, environment)]:
        label = f"{name}[{extra}]" if extra else name
        for requirement in requires:
            if canonical(requirement.name) != name and _applies(requirement, environment, extra):
                yield requirement, label


def explain(report: dict, installed: set[str]) -> Closure:
    """The chains of pip's `report`; `installed`: the names pip took as already installed."""
    environment = report.get("environment", {})
    items = {canonical(item["metadata"]["name"]): item for item in report["install"]}
    chains: dict[str, list[str]] = {}
    provided: dict[str, str] = {}
    queue: deque[tuple[str, frozenset[str]]] = deque()
    for name, item in items.items():
        if item.get("requested"):
            chains[name] = []
            queue.append((name, frozenset(item.get("requested_extras") or ())))
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, asked = queue.popleft()
        if (name, asked) in seen:
            continue
        seen.add((name, asked))
        for requirement, label in requirements_of(items[name], set(asked), environment):
            child, chain = canonical(requirement.name), [*chains[name], label]
            if child in items:
                chains.setdefault(child, chain)
                queue.append((child, frozenset(requirement.extras)))
            elif child in installed:
                provided.setdefault(child, " > ".join(chain))
            else:
                logger.warning("%s (of %s) is neither planned nor installed", requirement, label)
    missing = sorted(set(items) - set(chains))
    if missing:
        logger.warning("not reached from the requested packages: %s", ", ".join(missing))
    why = {name: " > ".join(chain) or REQUESTED for name, chain in chains.items()}
    return Closure(why, provided)
