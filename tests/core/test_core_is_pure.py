"""The core stays pure: stdlib only, and nothing from evolving_rl outside evolving_rl.core."""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import evolving_rl.core

CORE_DIR = Path(evolving_rl.core.__file__).parent
FORBIDDEN = (
    "torch",
    "flask",
    "requests",
    "aiohttp",
    "slime",
    "yaml",
    "waitress",
    "sentence_transformers",
    "transformers",
    "numpy",
)


def core_modules():
    names = [f"evolving_rl.core.{info.name}" for info in pkgutil.iter_modules([str(CORE_DIR)])]
    return ["evolving_rl.core", *sorted(names)]


def test_every_core_module_found():
    names = core_modules()
    for expected in ("skill", "audit", "rewards", "roles", "grpo", "grid", "actions"):
        assert f"evolving_rl.core.{expected}" in names


def test_importing_core_pulls_in_nothing_heavy():
    script = (
        "import importlib, json, sys\n"
        f"for name in {core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(completed.stdout)
    heavy = [name for name in loaded if name.split(".")[0] in FORBIDDEN]
    assert heavy == []
    outside = [
        name
        for name in loaded
        if name.startswith("evolving_rl.")
        and name != "evolving_rl.core"
        and not name.startswith("evolving_rl.core.")
    ]
    assert outside == []


def imported_roots(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "use absolute imports in core"
            yield node.module


def test_core_sources_import_only_stdlib_or_core():
    stdlib = sys.stdlib_module_names
    offenders = []
    for path in sorted(CORE_DIR.glob("*.py")):
        for module in imported_roots(ast.parse(path.read_text(), filename=str(path))):
            root = module.split(".")[0]
            allowed = module == "evolving_rl.core" or module.startswith("evolving_rl.core.")
            if root == "__future__" or root in stdlib or allowed:
                continue
            offenders.append(f"{path.name}: {module}")
    assert offenders == []


def test_core_has_no_io_or_print():
    banned_calls = {"print", "open", "input", "exec", "eval"}
    banned_modules = {"os", "io", "subprocess", "socket", "asyncio", "logging", "pathlib", "time"}
    offenders = []
    for path in sorted(CORE_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in banned_calls:
                    offenders.append(f"{path.name}:{node.lineno} {node.func.id}()")
        for module in imported_roots(tree):
            if module.split(".")[0] in banned_modules:
                offenders.append(f"{path.name}: imports {module}")
    assert offenders == []
