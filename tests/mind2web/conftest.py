"""Shared Mind2Web test fixtures: a small generated dataset in the official layout.

`mind2web_generated`: a session-scoped `GeneratedData` (root, files, counts) of 24 tasks — train
JSON files plus the password-protected test zip — generated once from `mind2web_spec` (its
`password` opens the zip). Read-only: copy it before changing anything.
`mind2web_prepared`: a session-scoped `PreparedData`: a copy of that root with the test zip
extracted by `env.mind2web.prepare` (so `data/test_*/` folders exist, as the env server reads
them) and its prepared JSONL splits.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from env.mind2web.generate import GeneratedData, GenerateSpec, generate
from env.mind2web.prepare import prepare

ZIP_PASSWORD = "fixture-password"
FIXTURE_SPEC = GenerateSpec(tasks=24, seed=7, distractors=12, tasks_per_file=5,
                            password=ZIP_PASSWORD)


@dataclass(frozen=True)
class PreparedData:
    root: Path
    prepared_dir: Path


@pytest.fixture(scope="session")
def mind2web_spec() -> GenerateSpec:
    return FIXTURE_SPEC


@pytest.fixture(scope="session")
def mind2web_generated(tmp_path_factory) -> GeneratedData:
    return generate(tmp_path_factory.mktemp("mind2web") / "root", FIXTURE_SPEC)


@pytest.fixture(scope="session")
def mind2web_prepared(mind2web_generated, tmp_path_factory) -> PreparedData:
    base = tmp_path_factory.mktemp("mind2web_prepared")
    root = shutil.copytree(mind2web_generated.root, base / "root")
    prepared_dir = base / "prepared"
    prepare(root, prepared_dir, password=ZIP_PASSWORD)
    return PreparedData(root=Path(root), prepared_dir=prepared_dir)
