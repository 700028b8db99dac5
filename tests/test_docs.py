"""Citations of the project's docs resolve, and nothing cites the design notes outside the repo.

A citation is "docs/<name>.md", optionally followed by "§N" or "§N.M" (e.g. "docs/design.md §4.1"),
anywhere in the text files under src/, env/, scripts/, configs/, benchmarks/, tests/, docs/ and in
README.md. The file must exist, and a cited section must be a heading of that file numbered so
("## 4. Title" is §4, "### 4.1 Title" is §4.1). Inside a doc, a bare "§N" cites a section of that
same doc. The old private note (upper-case DESIGN, with or without ".md") must not be cited
anywhere: the repository describes itself in docs/design.md.

The files map's "## Files" tree (docs/files.md, which the README links) has one line per file: each
line is an entry (its name, then what it is), indented 2 spaces per level under the folder entry
above it (a name ending in "/"). Every file under `TREE_ROOTS` (a package's `__init__.py` and
`__pycache__` aside; the folders of `SUMMARISED` are one line each) has its own entry, every entry
exists, and every file's says what the file is.

The design's layer table (docs/design.md §1, rows "| layer | `unit` | owns |") names the code's
units: every package and module directly under `src/evolving_rl`, and `env/`, is the unit of a
row, and every unit of a row exists (under `src/evolving_rl`, or `env/` at the root); every
package nested in a unit is named in that unit's row, by its path inside the unit (`engine/`);
and the rows of `domains/` and `env/`, where an environment adds its code, name each module
(`mind2web.py`) and package (`mind2web/`) directly inside them. Names count inside backticks only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("src", "env", "scripts", "configs", "benchmarks", "tests", "docs")
TEXT_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".md", ".toml", ".txt"}
CITATION = re.compile(r"docs/([\w.-]+\.md)(?:\s*§\s*(\d+(?:\.\d+)*))?")
SECTION_REF = re.compile(r"§\s*(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)[.\s]", re.MULTILINE)
PRIVATE_NOTE = re.compile(r"\bDESIGN\b")
TREE_ROOTS = (".ci", "benchmarks", "configs", "docs", "env", "scripts", "src/evolving_rl",
              "pyproject.toml")
SUMMARISED = ("docs/figures/", "docs/results/", "tests/", "slime/", "data/", "models/")
FILES_MAP = "docs/files.md"  # the "## Files" tree
README_MAX_LINES = 300
RESULT_LINK = re.compile(r"docs/results/([\w.-]+\.md)")
LAYER_ROW = re.compile(r"^\|\s*\d+\s*\|\s*`([^`]+)`\s*\|(.*)\|\s*$", re.MULTILINE)
ENUMERATED_UNITS = ("domains/", "env/")  # rows that name every module and package inside them


def scanned_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    for name in SCANNED_DIRS:
        for path in sorted((ROOT / name).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def sections(doc: Path) -> set[str]:
    """Section numbers of a Markdown doc, from its numbered headings."""
    return set(HEADING.findall(doc.read_text(encoding="utf-8")))


def numbered_lines(path: Path) -> Iterator[tuple[str, str]]:
    """("<path>:<line>", text) of every line of `path`."""
    relative = path.relative_to(ROOT)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        yield f"{relative}:{number}", line


def citation_problems(path: Path) -> list[str]:
    problems = []
    for where, line in numbered_lines(path):
        for name, section in CITATION.findall(line):
            doc = ROOT / "docs" / name
            if not doc.is_file():
                problems.append(f"{where}: docs/{name} does not exist")
            elif section and section not in sections(doc):
                problems.append(f"{where}: docs/{name} has no section §{section}")
    return problems


def test_doc_citations_resolve() -> None:
    problems = [problem for path in scanned_files() for problem in citation_problems(path)]
    assert not problems, "\n".join(problems)


def test_section_references_inside_docs_resolve() -> None:
    problems = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        known = sections(doc)
        for where, line in numbered_lines(doc):
            bare = CITATION.sub("", line)  # citations of other docs are checked above
            problems += [f"{where}: no section §{section} in this doc"
                         for section in SECTION_REF.findall(bare) if section not in known]
    assert not problems, "\n".join(problems)


def test_design_doc_sections_are_numbered_in_order() -> None:
    numbers = HEADING.findall((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    top = [int(n) for n in numbers if "." not in n]
    assert top == list(range(1, len(top) + 1)), top


def test_no_citation_of_the_private_design_notes() -> None:
    this_file = Path(__file__).resolve()
    hits = [where for path in scanned_files() if path.resolve() != this_file
            for where, line in numbered_lines(path) if PRIVATE_NOTE.search(line)]
    assert not hits, "cites the private design notes:\n" + "\n".join(hits)


def readme_tree(readme: str) -> dict[str, str]:
    """Entry path -> its text, from the files map's Files block (folders end in "/")."""
    block = readme.split("## Files", 1)[1].split("```")[1]
    entries: dict[str, str] = {}
    folders: list[str] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name, _, text = line.strip().partition(" ")
        del folders[depth:]
        entries["".join(folders) + name] = text.strip()
        if name.endswith("/"):
            folders.append(name)
    return entries


def tree_files(root: Path = ROOT) -> set[str]:
    """The files the Files tree must name, relative to `root`."""
    files = set()
    for name in TREE_ROOTS:
        paths = [root / name] if (root / name).is_file() else (root / name).rglob("*")
        for path in paths:
            relative = path.relative_to(root).as_posix()
            if (path.is_file() and path.name != "__init__.py" and "__pycache__" not in path.parts
                    and not relative.startswith(SUMMARISED)):
                files.add(relative)
    return files


def readme_tree_problems(readme: str, root: Path = ROOT) -> list[str]:
    entries = readme_tree(readme)
    problems = [f"no line for {path}" for path in sorted(tree_files(root) - set(entries))]
    problems += [f"{path}: no such file or folder" for path in entries
                 if not (root / path).exists()]
    problems += [f"{path}: says nothing" for path, text in entries.items()
                 if not text and not path.endswith("/")]
    return problems


def test_readme_tree_has_a_line_for_every_file() -> None:
    problems = readme_tree_problems((ROOT / FILES_MAP).read_text(encoding="utf-8"))
    assert not problems, f"{FILES_MAP} Files tree:\n" + "\n".join(problems)


def test_the_readme_links_the_files_map() -> None:
    assert f"]({FILES_MAP})" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_guide_of_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; move measurements to docs/results/ and detail to docs/")


def test_the_readme_tree_check_catches_missing_stale_and_silent_lines(tmp_path) -> None:
    (tmp_path / "env" / "alfworld").mkdir(parents=True)
    for name in ("env/launch.py", "env/alfworld/router.py", "env/alfworld/__init__.py"):
        (tmp_path / name).write_text("")
    readme = ("## Files\n\n```\nenv/  servers\n  launch.py  spawn\n  alfworld/  games\n"
              "    gone.py  moved away\n    router.py\n```\n")
    assert readme_tree_problems(readme, tmp_path) == [
        "env/alfworld/gone.py: no such file or folder", "env/alfworld/router.py: says nothing"]
    assert readme_tree_problems(readme.replace("  launch.py  spawn\n", ""), tmp_path)[0] == (
        "no line for env/launch.py")


def layer_rows(design: str) -> dict[str, set[str]]:
    """Unit -> the backticked names of its row's other cells, from the design's layer table."""
    return {unit: set(re.findall(r"`([^`]+)`", owns)) for unit, owns in LAYER_ROW.findall(design)}


def unit_name(path: Path) -> str:
    """`name/` for a package folder, the file name for a module."""
    return f"{path.name}/" if path.is_dir() else path.name


def code_children(folder: Path) -> list[Path]:
    """The packages (folders with an `__init__.py`) and modules directly inside `folder`."""
    return sorted(path for path in folder.iterdir()
                  if (path.is_dir() and (path / "__init__.py").is_file())
                  or (path.suffix == ".py" and path.name != "__init__.py"))


def layer_table_problems(design: str, root: Path = ROOT) -> list[str]:
    """What the layer table misses or names wrongly, against the tree at `root` (module
    docstring)."""
    package = root / "src" / "evolving_rl"
    rows = layer_rows(design)
    units = {unit_name(path) for path in code_children(package)} | {"env/"}
    problems = [f"no row for {unit}" for unit in sorted(units - rows.keys())]
    for unit, named in sorted(rows.items()):
        folder = root / "env" if unit == "env/" else package / unit
        if not folder.exists():
            problems.append(f"row {unit} names nothing that exists")
        if not folder.is_dir():
            continue
        nested = [path for path in folder.rglob("__init__.py") if path.parent != folder]
        wanted = {f"{path.parent.relative_to(folder).as_posix()}/" for path in nested}
        if unit in ENUMERATED_UNITS:
            wanted |= {unit_name(path) for path in code_children(folder)}
        problems += [f"row {unit} does not name {name}" for name in sorted(wanted - named)]
    return problems


def test_design_layer_table_names_every_package_and_module() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert layer_rows(design), "no layer table found in docs/design.md"
    problems = layer_table_problems(design)
    assert not problems, "docs/design.md layer table:\n" + "\n".join(problems)


def test_the_layer_table_check_catches_what_is_missing() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    no_mind2web = design.replace("(`mind2web.py`", "(mind2web.py").replace("(`mind2web/`)", "")
    assert {"row domains/ does not name mind2web.py", "row env/ does not name mind2web/"} <= set(
        layer_table_problems(no_mind2web))
    no_skills = "\n".join(line for line in design.splitlines() if "| `skills/` |" not in line)
    assert "no row for skills/" in layer_table_problems(no_skills)
    stale = design.replace("| `losses.py` |", "| `gone.py` |")
    assert {"no row for losses.py", "row gone.py names nothing that exists"} <= set(
        layer_table_problems(stale))


def test_the_layer_table_check_wants_nested_packages_in_their_row(tmp_path) -> None:
    for package in ("src/evolving_rl/local/engine", "src/evolving_rl/local/notices", "env"):
        (tmp_path / package).mkdir(parents=True)
    (tmp_path / "src/evolving_rl/local/__init__.py").touch()
    (tmp_path / "src/evolving_rl/local/engine/__init__.py").touch()
    (tmp_path / "src/evolving_rl/local/job.py").touch()
    table = "| 5 | `local/` | The embedded backend: {}. |\n| 3 | `env/` | Servers. |\n"
    assert layer_table_problems(table.format("the job"), tmp_path) == [
        "row local/ does not name engine/"]  # notices/ is data: no __init__.py
    assert layer_table_problems(table.format("the decoder (`engine/`)"), tmp_path) == []


def test_every_result_report_is_linked_and_every_link_exists() -> None:
    """docs/results/ holds one report per experiment: each is linked from the README or the
    design, and every report they link is there."""
    linked = {name for doc in ("README.md", "docs/design.md")
              for name in RESULT_LINK.findall((ROOT / doc).read_text(encoding="utf-8"))}
    present = {path.name for path in (ROOT / "docs" / "results").glob("*.md")}
    assert linked - present == set(), "linked but missing"
    assert present - linked == set(), "reports no README or design line links"
