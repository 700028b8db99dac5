"""The Python half of scripts/slime_wheelhouse.sh: the image's packages, pip's plan, the manifest.

Subcommands (the shell script runs them with its build venv's Python; the tests import them):
- `present FREEZE SITE CONSTRAINTS KEEP`: for each `name==version` line of FREEZE (the target
  image's `pip freeze`), a dist-info holding only METADATA (name and version, no dependencies)
  in SITE, the site-packages of the venv pip resolves in: pip then takes those packages as
  installed, keeps them wherever their version satisfies what the closure asks, and plans only
  what is missing or at another version. The kept packages whose name matches the regular
  expression KEEP (the torch family: replacing them would break the image's torch) are also
  pinned in CONSTRAINTS, so the resolver must find a closure that keeps them. Lines that are not
  `name==version` (options, `name @ url`, editable installs) are skipped and named on stderr.
  `--resolve-again REGEX`: the image's packages to leave out of SITE, so that pip resolves them
  from the index with their real requirements (the numpy-1 build, see the shell script).
- `plan REPORT FREEZE KEEP`: pip's `--report` of that resolution, one line per package to fetch,
  "name version image_version sha256" (image_version "-" when the image lacks it, sha256 "-"
  when the index gave none). A package matching KEEP the image has is an error (exit 1).
- `manifest HOUSE PLAN`: MANIFEST.tsv (name, version, image version, file, size, sha256) of
  the wheels in HOUSE, each checked against the plan's hash where the plan has one; prints the
  count, the total size and the ten largest wheels.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("slime_wheelhouse")

FREEZE_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
WHEEL_NAME = re.compile(r"^([^-]+)-([^-]+)-.+\.whl$")
MANIFEST = "MANIFEST.tsv"
MANIFEST_FIELDS = ("name", "version", "image_version", "filename", "size", "sha256")
LARGEST = 10


class WheelhouseError(RuntimeError):
    """A plan or a download the wheelhouse must not be built from."""


def canonical(name: str) -> str:
    """PEP 503's normalised name: lower case, runs of `-_.` as one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_freeze(path: Path) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a `pip freeze` output."""
    present: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = FREEZE_LINE.match(line)
        if match is None:
            logger.warning("%s:%d: not name==version, skipped: %s", path, number, line)
            continue
        present[canonical(match.group(1))] = match.group(2)
    return present


def write_present(present: dict[str, str], site: Path, constraints: Path, keep: str,
                  resolve_again: str = "") -> None:
    """Fake dist-infos of the image's packages in `site`; the KEEP ones pinned in `constraints`.
    Packages matching `resolve_again` get none: pip resolves them from the index, with their real
    requirements (a stand-in has none, so pip would keep one that contradicts the closure)."""
    keep_re = re.compile(keep)
    again_re = re.compile(resolve_again) if resolve_again else None
    pinned = []
    for name, version in sorted(present.items()):
        if again_re is not None and again_re.fullmatch(name):
            logger.info("resolved again, not taken as installed: %s %s", name, version)
            continue
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
        (info / "INSTALLER").write_text("target-image\n", encoding="utf-8")
        if keep_re.fullmatch(name):
            pinned.append(f"{name}=={version}")
    constraints.write_text("".join(f"{line}\n" for line in pinned), encoding="utf-8")


@dataclass(frozen=True)
class Planned:
    """One package of pip's plan: what to fetch, and what the image has of it."""

    name: str
    version: str
    image_version: str | None
    sha256: str | None


def read_plan(report: dict, present: dict[str, str], keep: str) -> list[Planned]:
    """The packages pip's report would install; refuses one of the image's KEEP packages."""
    keep_re = re.compile(keep)
    plan = []
    for item in report["install"]:
        name = canonical(item["metadata"]["name"])
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        plan.append(Planned(name, item["metadata"]["version"], present.get(name),
                            hashes.get("sha256")))
    replaced = [p for p in plan if p.image_version is not None and keep_re.fullmatch(p.name)]
    if replaced:
        raise WheelhouseError("the closure would replace the image's " + ", ".join(
            f"{p.name} {p.image_version} (with {p.version})" for p in replaced))
    return sorted(plan, key=lambda p: p.name)


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_manifest(house: Path, plan: list[Planned]) -> list[dict[str, str]]:
    """MANIFEST.tsv of the wheels in `house`: one per planned package, hashes checked."""
    by_name = {p.name: p for p in plan}
    rows = []
    for wheel in sorted(house.glob("*.whl")):
        match = WHEEL_NAME.match(wheel.name)
        if match is None:
            raise WheelhouseError(f"not a wheel's file name: {wheel.name}")
        name = canonical(match.group(1))
        planned = by_name.pop(name, None)
        if planned is None:
            raise WheelhouseError(f"{wheel.name} is in no plan (two versions, or a stray file)")
        digest = sha256_of(wheel)
        if planned.sha256 is not None and planned.sha256 != digest:
            raise WheelhouseError(f"{wheel.name}: sha256 {digest}, the resolution's file had "
                                  f"{planned.sha256} (another build of the same version?)")
        rows.append({"name": name, "version": planned.version,
                     "image_version": planned.image_version or "-", "filename": wheel.name,
                     "size": str(wheel.stat().st_size), "sha256": digest})
    if by_name:
        raise WheelhouseError("planned but not downloaded: " + ", ".join(sorted(by_name)))
    with (house / MANIFEST).open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, MANIFEST_FIELDS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def summary(rows: list[dict[str, str]]) -> str:
    """Count, total size, the ten largest wheels and the image's packages it replaces."""
    total = sum(int(row["size"]) for row in rows)
    lines = [f"{len(rows)} wheels, {total / 2**20:.0f} MiB ({total} bytes)", "largest:"]
    for row in sorted(rows, key=lambda r: -int(r["size"]))[:LARGEST]:
        lines.append(f"  {int(row['size']) / 2**20:7.1f} MiB  {row['filename']}")
    replaced = [f"{r['name']} {r['image_version']} -> {r['version']}"
                for r in rows if r["image_version"] != "-"]
    lines.append("replaces the image's: " + (", ".join(replaced) if replaced else "nothing"))
    return "\n".join(lines)


def read_plan_file(path: Path) -> list[Planned]:
    plan = []
    for line in path.read_text(encoding="utf-8").splitlines():
        name, version, image_version, sha256 = line.split()
        plan.append(Planned(name, version, None if image_version == "-" else image_version,
                            None if sha256 == "-" else sha256))
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("present")
    cmd.add_argument("freeze", type=Path)
    cmd.add_argument("site", type=Path)
    cmd.add_argument("constraints", type=Path)
    cmd.add_argument("keep")
    cmd.add_argument("--resolve-again", default="")
    cmd = commands.add_parser("plan")
    cmd.add_argument("report", type=Path)
    cmd.add_argument("freeze", type=Path)
    cmd.add_argument("keep")
    cmd = commands.add_parser("manifest")
    cmd.add_argument("house", type=Path)
    cmd.add_argument("plan", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="slime_wheelhouse: %(message)s")
    try:
        if args.command == "present":
            write_present(read_freeze(args.freeze), args.site, args.constraints, args.keep,
                          args.resolve_again)
        elif args.command == "plan":
            report = json.loads(args.report.read_text(encoding="utf-8"))
            for p in read_plan(report, read_freeze(args.freeze), args.keep):
                print(p.name, p.version, p.image_version or "-", p.sha256 or "-")
        else:
            print(summary(write_manifest(args.house, read_plan_file(args.plan))))
    except WheelhouseError as error:
        logger.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
