"""The fidelity table (docs/fidelity.md) cannot drift from the paper profiles and the train scripts.

Every table row whose "Checked at" cell names a place is checked here: `<profile>.yaml <key.path>`
(the loaded, validated config), `<script> <VAR>` (a `${VAR:-default}` of the script or of the
shared launch it sources) or `<script> --flag` (the value slime's parser gets from the script run
with its default config: `launcher_args` of tests/slime/slime_fixtures.py), for the scripts
train_alfworld.sh and train_web.sh. The row's "Ours" cell must equal that value, and a row whose
"Reference" differs from "Ours" (an "Ours" cell that starts with "same" matches) must say why in
its note (a note starting with "Deviation").
"""

from __future__ import annotations

import re
from argparse import Namespace
from functools import cache
from pathlib import Path

import pytest
import yaml

from evolving_rl.config import load_config
from tests.slime.slime_fixtures import launch_text, launcher_args, script_defaults

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "fidelity.md"
SCRIPTS = {"train_alfworld.sh": ROOT / "scripts" / "alfworld" / "train_alfworld.sh",
           "train_web.sh": ROOT / "scripts" / "web" / "train_web.sh"}
PROFILES = {"alfworld.yaml": ROOT / "configs" / "alfworld.yaml",
            "web.yaml": ROOT / "configs" / "web.yaml"}
COLUMNS = ("setting", "reference", "ours", "checked_at", "note")


def _cell_value(cell: str) -> object:
    """A table cell's value: the YAML scalar inside its first `code span`."""
    match = re.search(r"`([^`]*)`", cell)
    if match is None:
        raise AssertionError(f"cell {cell!r} holds no `value`")
    return yaml.safe_load(match.group(1))


def table_rows() -> list[dict[str, str]]:
    """Rows of every 5-column table in the doc (header and rule lines skipped)."""
    rows = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != len(COLUMNS):
            continue
        if cells[0].lower() == "setting" or set(cells[0]) <= set("-: "):
            continue
        rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return rows


def checked_rows() -> list[dict[str, str]]:
    return [row for row in table_rows() if row["checked_at"].startswith("`")]


@cache
def _launched(script: str) -> Namespace:
    return launcher_args(SCRIPTS[script])


def _script_value(script: str, name: str) -> object:
    if name.startswith("--"):
        return getattr(_launched(script), name[2:].replace("-", "_"))
    defaults = script_defaults(launch_text(SCRIPTS[script]))
    assert name in defaults, f"{name} not found in {script}"
    return yaml.safe_load(defaults[name])


def actual_value(place: str) -> object:
    """The value at a "Checked at" place (see the module docstring)."""
    source, _, key = place.partition(" ")
    if source in SCRIPTS:
        return _script_value(source, key)
    value: object = load_config(PROFILES[source])
    for part in key.split("."):
        value = getattr(value, part)
    return value


def test_the_table_has_checked_rows_for_both_profiles_and_the_script():
    places = {_cell_value(row["checked_at"]).split(" ")[0] for row in checked_rows()}
    assert places == {"alfworld.yaml", "web.yaml", *SCRIPTS}


@pytest.mark.parametrize("row", checked_rows(), ids=lambda row: row["checked_at"].strip("`"))
def test_ours_is_what_the_profile_or_script_holds(row):
    place = _cell_value(row["checked_at"])
    assert actual_value(place) == _cell_value(row["ours"]), f"{row['setting']} at {place}"


@pytest.mark.parametrize("row", table_rows(), ids=lambda row: row["setting"])
def test_every_difference_from_the_reference_is_a_stated_deviation(row):
    reference, ours = row["reference"], row["ours"]
    if "`" in reference and "`" in ours and _cell_value(reference) == _cell_value(ours):
        return
    if reference == ours or ours.lower().startswith("same"):
        return
    assert row["note"].startswith("Deviation"), f"{row['setting']}: {reference} vs {ours}"
