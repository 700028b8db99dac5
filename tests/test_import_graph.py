"""Imports point down the layers, and no module imports itself back through others.

Every `import` statement counts: module level, inside functions, and under `TYPE_CHECKING`. A unit
is a subpackage or top-level module of `evolving_rl` (`pipeline`, `losses`, ...) or the server
package `env/`. The layers, lowest first (a unit imports only units of lower layers, and any
module of its own unit):

  0  core                     pure records and rules (stdlib only: tests/core/test_core_is_pure.py)
  1  config, losses           the typed schema and loader; the PPO-clip loss math (torch only)
  2  clients, retrieval        HTTP clients of the servers; embedding, cache and index
  3  domains                  environment adapters (prompts, parsing, metrics, packing samples)
  4  pipeline, env            the four-stage rollout, its assembly, metrics and evaluation; the
                              server processes (they read an adapter's pure modules: the one
                              Mind2Web scoring rule, never the trainer)
  5  local, slime_bridge,     the embedded CPU/GPU backend (it starts the env servers); slime glue;
     skills                   the skill-library command (list, search, show, export)
  6  evaluate                 checkpoint evaluation (runs a checkpoint through the local backend
                              or a server and starts the servers as the local job does)
  7  slime_hooks              the entry points slime imports

`evolving_rl/__init__.py` (the version) sits in layer 0. Cycles are checked between modules, so
two modules of one unit must not import each other either (not even for type hints). And no two
classes of `evolving_rl` share a name, so that an import line names one thing.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"evolving_rl": ROOT / "src", "env": ROOT}
LAYERS = (
    {"evolving_rl", "core"},
    {"config", "losses"},
    {"clients", "retrieval"},
    {"domains"},
    {"pipeline", "env"},
    {"local", "slime_bridge", "skills"},
    {"evaluate"},
    {"slime_hooks"},
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of our packages."""
    out = {}
    for package, base in PACKAGES.items():
        for path in sorted((base / package).rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = module_files()


def unit(module: str) -> str:
    """`evolving_rl.pipeline.rollout` -> `pipeline`; `env.alfworld.router` -> `env`."""
    parts = module.split(".")
    if parts[0] == "env":
        return "env"
    return parts[1] if len(parts) > 1 else parts[0]


def known(name: str) -> str | None:
    """The module `name` loads: itself if it is ours, else its nearest ancestor of ours."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports(module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module of ours) for every import statement of `module`."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = known(name)
            if target is not None and target != module:
                yield node.lineno, target


GRAPH = {module: sorted({target for _, target in imports(module)}) for module in MODULES}


def test_every_unit_has_a_layer():
    found = {unit(module) for module in MODULES}
    assert found - set(RANK) == set(), "place new units in LAYERS"
    assert set(RANK) - found == set(), "LAYERS names a unit that no longer exists"


def test_imports_point_down():
    offenders = []
    for module in MODULES:
        for line, target in imports(module):
            source, dest = unit(module), unit(target)
            if source != dest and RANK[dest] >= RANK[source]:
                offenders.append(f"{MODULES[module].relative_to(ROOT)}:{line} ({source}, "
                                 f"layer {RANK[source]}) imports {target} (layer {RANK[dest]})")
    assert offenders == []


ENVIRONMENTS = {m.split(".")[1] for m in MODULES if m.startswith("env.") and m.count(".") >= 2}


def environment(module: str) -> str | None:
    """The environment a module belongs to: `env.<name>.*` or `evolving_rl.domains.<name>*`
    for each package `<name>` of `env/`; None for shared modules."""
    parts = module.split(".")
    if parts[0] == "env" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["evolving_rl", "domains"] and len(parts) > 2:
        name = parts[2].split("_")[0]
        return name if name in ENVIRONMENTS else None
    return None


def test_no_environment_imports_another():
    """What two environments share lives in a shared module (`env/wire.py`, `core/actions.py`),
    so a new environment copies nothing from another."""
    offenders = [f"{module} imports {target}" for module in MODULES for _, target in
                 imports(module) if environment(module) and environment(target)
                 and environment(target) != environment(module)]
    assert offenders == []


def test_env_reads_only_pure_domain_modules():
    """A server may import a domains module only if that module imports nothing but core (the
    Mind2Web scoring rule): the adapters and the clients stay out of server processes."""
    reached = {target for module in MODULES if unit(module) == "env"
               for target in GRAPH[module] if unit(target) == "domains"}
    impure = {module: [t for t in GRAPH[module] if unit(t) != "core"]
              for module in reached | {"evolving_rl.domains"}}
    assert {module: targets for module, targets in impure.items() if targets} == {}


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph` (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def test_no_import_cycles():
    cycles = [component for component in strongly_connected(GRAPH) if len(component) > 1]
    assert cycles == []


def test_class_names_are_unique():
    where: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if module.startswith("evolving_rl"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(module)
    assert {name: modules for name, modules in where.items() if len(modules) > 1} == {}


def test_cycle_finder_finds_cycles():
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["d"]}
    assert sorted(c for c in strongly_connected(graph) if len(c) > 1) == [["a", "b", "c"]]


def test_the_engine_is_imported_through_its_entry_point():
    """Outside `local.engine`, code imports the package (`LocalPolicy`), never its modules."""
    inside = [module for module in MODULES if module.startswith("evolving_rl.local.engine.")]
    offenders = [f"{module} imports {target}" for module, targets in GRAPH.items()
                 if not module.startswith("evolving_rl.local.engine")
                 for target in targets if target in inside]
    assert inside and offenders == []


def test_evaluation_does_not_stand_on_the_training_rollout():
    """What the evaluation protocols share with the rollout (retrieval of similar tasks) sits
    below both: no evaluation module reaches `pipeline.rollout` through any chain of imports."""
    reached, todo = set(), ["evolving_rl.pipeline.evaluation"]
    while todo:
        for target in GRAPH[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert "evolving_rl.pipeline.similar_tasks" in reached
    assert "evolving_rl.pipeline.rollout" not in reached


def test_evaluation_starts_servers_without_the_local_job():
    assert [module for module, targets in GRAPH.items()
            if unit(module) == "evaluate" and "evolving_rl.local.job" in targets] == []
