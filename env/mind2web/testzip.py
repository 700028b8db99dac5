"""Extract the official password-protected Mind2Web test zip into the data root.

Owns one step: every `*.zip` at the data root (where the published dataset keeps `test.zip`) or in
`<root>/data/` (where users also put it) holding `test_task/`, `test_website/` or `test_domain/`
JSON files is extracted to `<out>/<split>/<file>.json`, `<out>` being the folder that holds
`train/` (`<root>/data/`, or the root itself in that layout; only the split folder and the file
name of a member are used, so no member can write elsewhere); two zips holding the same split are
refused, and so is a `data/<split>/` folder that none of the zips found holds (left from an earlier
zip: stale; the user deletes it or restores the zip). With no zip at all, test split folders
extracted earlier are used as they are, with a warning naming them (a zip deleted after
extraction to save space is a normal setup; the warning says nothing checks them). Files are
decrypted into a staging folder — by the compiled `unzip` where installed
(`env.mind2web.unzip_tool`: the password typed at its prompt, never on a command line), else
streamed by `zipfile` (bounded memory, slower) — under a progress bar that says which, then each
split folder is replaced by rename. A marker per zip (next to it: `.<zip>.extracted`, its size,
mtime and sha256: `env.file_identity`) makes a second run a no-op while the split
folders exist, also in a copy of the data folder. The password comes from the caller (the CLI reads
$MIND2WEB_ZIP_PASSWORD); a missing or wrong one raises `ZipPasswordError` saying what to do.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from env.file_identity import file_sha256, same_file
from env.mind2web.unzip_tool import UnzipError, plain_names, unzip_available, unzip_members

logger = logging.getLogger(__name__)

TEST_SPLITS = ("test_task", "test_website", "test_domain")
PASSWORD_ENV = "MIND2WEB_ZIP_PASSWORD"


class ZipPasswordError(RuntimeError):
    """The test zip needs a password that was not given, or the one given is wrong."""


class DuplicateSplitError(ValueError):
    """Two test zips hold the same split."""


class StaleSplitError(ValueError):
    """A test split folder is there but no test zip holds that split any more."""


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
    return {"zip": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "sha256": file_sha256(path)}


def _marks(marker: Path, zip_path: Path) -> bool:
    """Whether the extraction marker names this zip as it is now (by
    `env.file_identity`'s rule: a copied data folder's zip is the same zip, and
    needs no password again)."""
    try:
        mark = json.loads(marker.read_text())
        return mark["zip"] == zip_path.name and same_file(
            zip_path, mark["size"], mark["mtime_ns"], mark.get("sha256"))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _marker(zip_path: Path) -> Path:
    return zip_path.with_name(f".{zip_path.name}.extracted")


def _missing_password(zip_path: Path) -> str:
    return (f"{zip_path} is password-protected: set {PASSWORD_ENV} to the password given on the "
            "Mind2Web dataset card (osunlp/Mind2Web) and run again")


def _wrong_password(zip_path: Path) -> str:
    return (f"wrong password for {zip_path}: set {PASSWORD_ENV} to the password given on the "
            "Mind2Web dataset card (for generated data: the generator's --password)")


def _with_zipfile(archive: zipfile.ZipFile, members: dict, staging: Path,
                  password: str | None, zip_path: Path, bar: tqdm) -> None:
    pwd = password.encode() if password is not None else None
    for name, (split, file_name) in sorted(members.items()):
        (staging / split).mkdir(parents=True, exist_ok=True)
        try:
            with archive.open(name, pwd=pwd) as src, \
                    (staging / split / file_name).open("wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    bar.update(len(chunk))
        except RuntimeError as err:
            raise ZipPasswordError(_wrong_password(zip_path)) from err
        except (zlib.error, zipfile.BadZipFile) as err:
            raise ZipPasswordError(_wrong_password(zip_path)) from err


def _with_unzip(archive: zipfile.ZipFile, members: dict, staging: Path, password: str,
                zip_path: Path, bar: tqdm) -> None:
    """One `unzip` run per split (paths junked into the split's folder)."""
    by_split: dict[str, list[str]] = {}
    for name, (split, _) in sorted(members.items()):
        by_split.setdefault(split, []).append(name)
    before = 0
    for split, names in by_split.items():
        def progress(done: int, base: int = before) -> None:
            bar.update(base + done - bar.n)

        if not unzip_members(zip_path, names, staging / split, password, progress):
            raise ZipPasswordError(_wrong_password(zip_path))
        before += sum(archive.getinfo(n).file_size for n in names)
        bar.update(before - bar.n)


def _copy_out(archive: zipfile.ZipFile, members: dict, staging: Path, password: str | None,
              zip_path: Path) -> None:
    """Decrypt `members` into `staging/<split>/`: with `unzip` when it can, else `zipfile`."""
    encrypted = any(archive.getinfo(n).flag_bits & 1 for n in members)
    if encrypted and password is None:
        raise ZipPasswordError(_missing_password(zip_path))
    total = sum(archive.getinfo(n).file_size for n in members)
    if encrypted and unzip_available() and plain_names(list(members)):
        try:
            with tqdm(total=total, unit="B", unit_scale=True,
                      desc=f"decrypting {zip_path.name} with unzip") as bar:
                _with_unzip(archive, members, staging, password, zip_path, bar)
            return
        except UnzipError as err:
            logger.warning("unzip failed (%s); decrypting in Python instead", err)
            shutil.rmtree(staging, ignore_errors=True)
    elif encrypted:
        logger.warning("no unzip (Info-ZIP) and setsid on PATH: decrypting %s in Python, about "
                       "1 MB/s", zip_path)
    action = "decrypting" if encrypted else "extracting"
    with tqdm(total=total, unit="B", unit_scale=True,
              desc=f"{action} {zip_path.name} in Python") as bar:
        _with_zipfile(archive, members, staging, password, zip_path, bar)


def _extracted(zip_path: Path, out_dir: Path, splits: set[str]) -> bool:
    marker = _marker(zip_path)
    return (marker.is_file() and _marks(marker, zip_path)
            and all((out_dir / split).is_dir() for split in splits))


def extract_zip(zip_path: Path, out_dir: Path, password: str | None) -> bool:
    """Extract one test zip into `out_dir/<split>/`; False when it holds no test split or is
    extracted already."""
    with zipfile.ZipFile(zip_path) as archive:
        members = _members(archive)
        if not members:
            logger.warning("%s holds no test_task/test_website/test_domain files", zip_path)
            return False
        if _extracted(zip_path, out_dir, {split for split, _ in members.values()}):
            return False
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = out_dir / f".extract.tmp{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            _copy_out(archive, members, staging, password, zip_path)
            for split_dir in sorted(staging.iterdir()):
                shutil.rmtree(out_dir / split_dir.name, ignore_errors=True)
                os.replace(split_dir, out_dir / split_dir.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    tmp = _marker(zip_path).with_name(_marker(zip_path).name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(_fingerprint(zip_path)))
    os.replace(tmp, _marker(zip_path))
    logger.info("extracted %d test files from %s into %s", len(members), zip_path, out_dir)
    return True


def find_test_zips(data_root: Path) -> list[Path]:
    """The zips where a test zip may be: the data root, then its `data/` folder."""
    return sorted(data_root.glob("*.zip")) + sorted((data_root / "data").glob("*.zip"))


def _splits_of(zip_path: Path) -> set[str]:
    with zipfile.ZipFile(zip_path) as archive:
        return {split for split, _ in _members(archive).values()}


def zip_splits(data_root: Path) -> set[str]:
    """The test splits the zips of `data_root` hold (nothing is extracted)."""
    return {split for path in find_test_zips(data_root) for split in _splits_of(path)}


def _refuse_stale(out_dir: Path, owner: dict[str, Path]) -> None:
    """`StaleSplitError` for a `data/<test split>/` folder that none of the zips found holds:
    its rows would come from an earlier zip. Not deleted here: the folder is the user's."""
    if not owner:
        _warn_unzipped(out_dir)
        return
    zips = ", ".join(sorted({str(path) for path in owner.values()}))
    for split in TEST_SPLITS:
        if split not in owner and (out_dir / split).exists():
            raise StaleSplitError(
                f"{out_dir / split} is there but no zip now holds it (zips: {zips}), so its "
                f"tasks would come from an earlier zip: delete {out_dir / split} if {split} "
                "is gone (a required split then stops preparation as empty), or put back the "
                "zip that holds it")


def _warn_unzipped(out_dir: Path) -> None:
    """No test zip found: test split folders extracted earlier are used as they are (the zip may
    have been deleted to save space), said in a warning naming them."""
    present = [str(out_dir / split) for split in TEST_SPLITS if (out_dir / split).exists()]
    if present:
        logger.warning("no test zip found: using %s as extracted earlier (nothing checks them "
                       "against a zip; put the zip back to re-check)", ", ".join(present))


def extract_test_zips(data_root: Path, password: str | None, out_dir: Path | None = None) -> int:
    """Extract every test zip of `data_root` into `out_dir` (the folder holding `train/`;
    `data_root/data` by default); how many were (re-)extracted.
    Two zips holding the same split are an error (which one would win is not for us to pick), and
    so is a split folder that no zip holds any more (`StaleSplitError`), before anything is
    extracted."""
    owner: dict[str, Path] = {}
    for path in find_test_zips(data_root):
        for split in sorted(_splits_of(path)):
            if split in owner:
                raise DuplicateSplitError(f"both {owner[split]} and {path} hold {split}: "
                                          "keep one of them")
            owner[split] = path
    out = out_dir or data_root / "data"
    _refuse_stale(out, owner)
    return sum(extract_zip(path, out, password) for path in find_test_zips(data_root))
