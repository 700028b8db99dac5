"""The Python half of scripts/slime_wheelhouse.sh: the image's packages, pip's plan, the manifest.

Subcommands (the shell script runs them with its tools venv's Python, which has `packaging`;
the tests import them):
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
  `--over MANIFEST`: a wheelhouse's MANIFEST.tsv (the slime wheelhouse, for the env wheels)
  installed over the image: its versions replace the freeze's, and all of them are pinned too.
- `plan REPORT FREEZE KEEP [--over MANIFEST] [--provided OUT]`: pip's `--report` of that
  resolution, one tab-separated line per package to fetch: name, version, image_version ("-"
  when the image lacks it), sha256 ("-" when the index gave none), source ("index", or the path
  of a local wheel pip found through --find-links) and why (the chain of requirers, see
  wheel_closure.py). A package matching KEEP the image has, or one of --over's, is an error
  (exit 1). `--provided OUT`: PROVIDED.tsv (name, version, provided_by, why) of the
  requirements that the image or --over met.
- `manifest HOUSE PLAN`: MANIFEST.tsv (name, version, image version, file, size, sha256, why)
  of the wheels in HOUSE, each checked against the plan's hash where the plan has one; prints
  the count, the total size and the ten largest wheels.
- `slime-label DIR PROJECT`: slime's commit for the requirements' header (see slime_label).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from wheel_closure import canonical, explain

logger = logging.getLogger("slime_wheelhouse")

FREEZE_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
WHEEL_NAME = re.compile(r"^([^-]+)-([^-]+)-.+\.whl$")
MANIFEST = "MANIFEST.tsv"
MANIFEST_FIELDS = ("name", "version", "image_version", "filename", "size", "sha256", "why")
PROVIDED = "PROVIDED.tsv"
PROVIDED_FIELDS = ("name", "version", "provided_by", "why")
SLIME_COPY = re.compile(r"slime-([0-9a-f]{7,40})")
LARGEST = 10


class WheelhouseError(RuntimeError):
    """A plan or a download the wheelhouse must not be built from."""


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


def read_manifest(path: Path) -> dict[str, str]:
    """{name: version} of a wheelhouse's MANIFEST.tsv."""
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["name"]: row["version"] for row in csv.DictReader(handle, delimiter="\t")}


def write_present(present: dict[str, str], site: Path, constraints: Path, keep: str,
                  resolve_again: str = "", pinned: frozenset[str] = frozenset()) -> None:
    """Fake dist-infos of the image's packages in `site`; the KEEP ones and those named in
    `pinned` pinned in `constraints`. Packages matching `resolve_again` get none: pip resolves
    them from the index, with their real requirements (a stand-in has none, so pip would keep
    one that contradicts the closure)."""
    keep_re = re.compile(keep)
    again_re = re.compile(resolve_again) if resolve_again else None
    pinned_lines = []
    for name, version in sorted(present.items()):
        if again_re is not None and again_re.fullmatch(name):
            logger.info("resolved again, not taken as installed: %s %s", name, version)
            continue
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
        (info / "INSTALLER").write_text("target-image\n", encoding="utf-8")
        if keep_re.fullmatch(name) or name in pinned:
            pinned_lines.append(f"{name}=={version}")
    constraints.write_text("".join(f"{line}\n" for line in pinned_lines), encoding="utf-8")


@dataclass(frozen=True)
class Planned:
    """One package of pip's plan: what to fetch (from the index, or the path of a local wheel),
    what the image has of it, and why the closure has it."""

    name: str
    version: str
    image_version: str | None
    sha256: str | None
    source: str = "index"
    why: str = ""


def _source(download_info: dict) -> str:
    url = urlparse(download_info["url"])
    return unquote(url.path) if url.scheme == "file" else "index"


def read_plan(report: dict, present: dict[str, str], keep: str,
              pinned: frozenset[str] = frozenset()) -> list[Planned]:
    """The packages pip's report would install; refuses one of the image's KEEP packages or of
    `pinned` (the slime wheelhouse's, under the env wheels)."""
    keep_re = re.compile(keep)
    why = explain(report, set(present)).why
    plan = []
    for item in report["install"]:
        name = canonical(item["metadata"]["name"])
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        plan.append(Planned(name, item["metadata"]["version"], present.get(name),
                            hashes.get("sha256"), _source(item["download_info"]),
                            why.get(name, "?")))
    replaced = [p for p in plan if p.image_version is not None
                and (keep_re.fullmatch(p.name) or p.name in pinned)]
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
                     "size": str(wheel.stat().st_size), "sha256": digest,
                     "why": planned.why})
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


def write_provided(path: Path, report: dict, present: dict[str, str],
                   over: frozenset[str]) -> None:
    """PROVIDED.tsv: the closure's requirements that the image or the wheelhouse `over` met."""
    provided = explain(report, set(present)).provided
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(PROVIDED_FIELDS)
        for name, why in sorted(provided.items()):
            writer.writerow([name, present[name],
                             "slime-wheelhouse" if name in over else "image", why])


def plan_line(p: Planned) -> str:
    return "\t".join([p.name, p.version, p.image_version or "-", p.sha256 or "-", p.source,
                      p.why])


def read_plan_file(path: Path) -> list[Planned]:
    plan = []
    for line in path.read_text(encoding="utf-8").splitlines():
        name, version, image_version, sha256, source, why = line.split("\t")
        plan.append(Planned(name, version, None if image_version == "-" else image_version,
                            None if sha256 == "-" else sha256, source, why))
    return plan


def _git(folder: Path, *args: str) -> str | None:
    result = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                            check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def slime_label(folder: Path, project: Path) -> str:
    """slime's own commit: HEAD of `folder` when it is a git checkout's top (the submodule),
    else the commit in a `git archive` copy's name (slime-624b824a), never the commit of a
    repository that merely contains `folder`. Says so when it is not `project`'s pin (the
    gitlink of its slime/ submodule) or when nothing tells the commit."""
    folder = folder.resolve()
    top = _git(folder, "rev-parse", "--show-toplevel")
    copy = SLIME_COPY.fullmatch(folder.name)
    if top is not None and Path(top).resolve() == folder:
        commit = _git(folder, "rev-parse", "--short=8", "HEAD") or "?"
    elif copy is not None:
        commit = copy.group(1)[:8]
    else:
        return f"of unknown commit ({folder} is no git checkout)"
    pin = _git(project, "rev-parse", "HEAD:slime")
    if pin is not None and not pin.startswith(commit):
        return f"{commit} (not the pin {pin[:8]})"
    return commit


def read_present(freeze: Path, over: Path | None) -> tuple[dict[str, str], frozenset[str]]:
    """The image's packages after the wheelhouse `over` (if any) is installed on it, and the
    names `over` holds."""
    present = read_freeze(freeze)
    if over is None:
        return present, frozenset()
    installed = read_manifest(over)
    return {**present, **installed}, frozenset(installed)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("present")
    cmd.add_argument("freeze", type=Path)
    cmd.add_argument("site", type=Path)
    cmd.add_argument("constraints", type=Path)
    cmd.add_argument("keep")
    cmd.add_argument("--resolve-again", default="")
    cmd.add_argument("--over", type=Path)
    cmd = commands.add_parser("plan")
    cmd.add_argument("report", type=Path)
    cmd.add_argument("freeze", type=Path)
    cmd.add_argument("keep")
    cmd.add_argument("--over", type=Path)
    cmd.add_argument("--provided", type=Path)
    cmd = commands.add_parser("manifest")
    cmd.add_argument("house", type=Path)
    cmd.add_argument("plan", type=Path)
    cmd = commands.add_parser("slime-label")
    cmd.add_argument("folder", type=Path)
    cmd.add_argument("project", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="slime_wheelhouse: %(message)s")
    try:
        if args.command == "present":
            present, over = read_present(args.freeze, args.over)
            write_present(present, args.site, args.constraints, args.keep, args.resolve_again,
                          over)
        elif args.command == "plan":
            report = json.loads(args.report.read_text(encoding="utf-8"))
            present, over = read_present(args.freeze, args.over)
            for planned in read_plan(report, present, args.keep, over):
                print(plan_line(planned))
            if args.provided is not None:
                write_provided(args.provided, report, present, over)
        elif args.command == "manifest":
            print(summary(write_manifest(args.house, read_plan_file(args.plan))))
        else:
            print(slime_label(args.folder, args.project))
    except WheelhouseError as error:
        logger.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
