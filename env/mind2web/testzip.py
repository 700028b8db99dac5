"""Extract the official password-protected Mind2Web test zip into the data root.

Owns one step: every `*.zip` in `<root>/data/` holding `test_task/`, `test_website/` or
`test_domain/` JSON files is extracted to `<root>/data/<split>/<file>.json` (only the split
folder and the file name of a member are used, so no member can write elsewhere). Files are
streamed out of the zip (bounded memory) into a staging folder, then each split folder is
replaced by rename. A marker per zip (`data/.<zip>.extracted`: size and mtime) makes a
second run a no-op. The password comes from the caller (the CLI reads $MIND2WEB_ZIP_PASSWORD);
a missing or wrong one raises `ZipPasswordError` saying what to do.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zipfile
import zlib
from pathlib import Path, PurePosixPath

logger = logging.getLogger(__name__)

TEST_SPLITS = ("test_task", "test_website", "test_domain")
PASSWORD_ENV = "MIND2WEB_ZIP_PASSWORD"


class ZipPasswordError(RuntimeError):
    """The test zip needs a password that was not given, or the one given is wrong."""


def _members(archive: zipfile.ZipFile) -> dict[str, tuple[str, str]]:
    """Member name -> (split, file name) for the test JSON files."""
    found = {}
    for name in archive.namelist():
        parts = PurePosixPath(name).parts
        split = next((p for p in parts[:-1] if p in TEST_SPLITS), None)
        if split and parts[-1].endswith(".json") and not parts[-1].startswith("."):
            found[name] = (split, parts[-1])
    return found


def _fingerprint(path: Path) -> dict:
    stat = path.stat()
    return {"zip": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _marker(zip_path: Path) -> Path:
    return zip_path.with_name(f".{zip_path.name}.extracted")


def _copy_out(archive: zipfile.ZipFile, members: dict, staging: Path, password: str | None,
              zip_path: Path) -> None:
    pwd = password.encode() if password is not None else None
    for name, (split, file_name) in sorted(members.items()):
        (staging / split).mkdir(parents=True, exist_ok=True)
        try:
            with archive.open(name, pwd=pwd) as src, \
                    (staging / split / file_name).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except RuntimeError as err:
            if password is None:
                raise ZipPasswordError(
                    f"{zip_path} is password-protected: set {PASSWORD_ENV} to the password "
                    "given on the Mind2Web dataset card (osunlp/Mind2Web) and run again") from err
            raise ZipPasswordError(_wrong_password(zip_path)) from err
        except (zlib.error, zipfile.BadZipFile) as err:
            raise ZipPasswordError(_wrong_password(zip_path)) from err


def _wrong_password(zip_path: Path) -> str:
    return (f"wrong password for {zip_path}: set {PASSWORD_ENV} to the password given on the "
            "Mind2Web dataset card (for generated data: the generator's --password)")


def extract_zip(zip_path: Path, password: str | None) -> bool:
    """Extract one test zip next to it; False when it holds no test split or is extracted."""
    marker = _marker(zip_path)
    if marker.is_file() and json.loads(marker.read_text()) == _fingerprint(zip_path):
        return False
    with zipfile.ZipFile(zip_path) as archive:
        members = _members(archive)
        if not members:
            logger.warning("%s holds no test_task/test_website/test_domain files", zip_path)
            return False
        staging = zip_path.parent / f".extract.tmp{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            _copy_out(archive, members, staging, password, zip_path)
            for split_dir in sorted(staging.iterdir()):
                shutil.rmtree(zip_path.parent / split_dir.name, ignore_errors=True)
                os.replace(split_dir, zip_path.parent / split_dir.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    tmp = marker.with_name(marker.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(_fingerprint(zip_path)))
    os.replace(tmp, marker)
    logger.info("extracted %d test files from %s", len(members), zip_path)
    return True


def extract_test_zips(data_dir: Path, password: str | None) -> int:
    """Extract every test zip in `data_dir`; returns how many were (re-)extracted."""
    return sum(extract_zip(path, password) for path in sorted(data_dir.glob("*.zip")))
