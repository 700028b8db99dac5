"""scripts/slime_wheelhouse.sh and its helper scripts/lib/slime_wheelhouse.py, with no network.

The script's syntax, `--help`, and its answers to bad arguments (exit 2, a message naming the
mistake) and to a missing target interpreter (exit 1, nothing written); a DEST built from the
same inputs is left alone, another build starts in a temporary folder. The helper: the image's
freeze read and written as dist-infos pip takes for installed packages, the plan read from pip's
report (what the image has at another version is named; replacing a kept package is refused),
the manifest's sizes and hashes checked against the plan. One test runs pip's real resolver,
offline on hand-made wheels, against such an image: a package the image has at a satisfying
version is not planned, one at another version is, and a kept one pinned makes it fail.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slime_wheelhouse.sh"
HELPER_PATH = ROOT / "scripts" / "lib" / "slime_wheelhouse.py"
_spec = importlib.util.spec_from_file_location("slime_wheelhouse", HELPER_PATH)
helper = importlib.util.module_from_spec(_spec)
sys.modules["slime_wheelhouse"] = helper  # dataclasses look their module up while defining
_spec.loader.exec_module(helper)


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture
def slime_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "slime"
    folder.mkdir()
    (folder / "requirements.txt").write_text("ray[default]\n")
    return folder


def test_script_parses_and_prints_its_usage():
    assert run(["bash", "-n", str(SCRIPT)]).returncode == 0
    result = run(["bash", str(SCRIPT), "--help"])
    assert (result.returncode, result.stderr) == (0, "")
    assert "Usage: scripts/slime_wheelhouse.sh [options] DEST" in result.stdout
    assert not any(line.startswith(("set -", "#!")) for line in result.stdout.splitlines())


@pytest.mark.parametrize(("args", "message"), [
    ([], "DEST (the wheelhouse folder) is required"),
    (["--bogus", "dest"], "unknown option --bogus"),
    (["--platform"], "--platform needs a value"),
    (["--python-version", "3", "dest"], "--python-version must look like 3.12"),
    (["--platform", "many linux", "dest"], "--platform must be a wheel tag"),
    (["--present", "/nonexistent/freeze.txt", "dest"], "--present: no file /nonexistent"),
    (["--keep", "", "dest"], "--keep must not be empty"),
    (["one", "two"], "one DEST only"),
])
def test_argument_errors(args, message, slime_dir):
    result = run(["bash", str(SCRIPT), "--slime-dir", str(slime_dir), *args])
    assert result.returncode == 2
    assert message in result.stderr
    assert "(see scripts/slime_wheelhouse.sh --help)" in result.stderr


def test_no_slime_source(tmp_path):
    result = run(["bash", str(SCRIPT), "--slime-dir", str(tmp_path), str(tmp_path / "wh")])
    assert result.returncode == 2
    assert f"no slime source at {tmp_path}" in result.stderr


def test_missing_interpreter(tmp_path, slime_dir):
    env = {k: v for k, v in os.environ.items() if k != "WHEELHOUSE_PYTHON"}
    result = run(["bash", str(SCRIPT), "--slime-dir", str(slime_dir), "--python-version", "3.99",
                  str(tmp_path / "wh")], env=env)
    assert result.returncode == 1
    assert "no Python 3.99 interpreter" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slime"]


def test_freeze_lines_and_the_image_as_installed_packages(tmp_path, caplog):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("# a comment\nTorch==2.11.0+cu130\nhuggingface_hub==1.33.0\n"
                      "-e git+https://example/x.git#egg=x\nmylib @ file:///tmp/mylib.whl\n"
                      "nvidia-nccl-cu13==2.28.9\n\n")
    present = helper.read_freeze(freeze)
    assert present == {"torch": "2.11.0+cu130", "huggingface-hub": "1.33.0",
                       "nvidia-nccl-cu13": "2.28.9"}
    assert "mylib @ file:///tmp/mylib.whl" in caplog.text and "-e git+" in caplog.text

    site, constraints = tmp_path / "site", tmp_path / "keep.txt"
    helper.write_present(present, site, constraints, "torch|nvidia-.+")
    found = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[site])}
    assert found == {"torch": "2.11.0+cu130", "huggingface-hub": "1.33.0",
                     "nvidia-nccl-cu13": "2.28.9"}
    assert all(not d.requires for d in importlib.metadata.distributions(path=[site]))
    assert constraints.read_text() == "nvidia-nccl-cu13==2.28.9\ntorch==2.11.0+cu130\n"


def test_packages_resolved_again_are_not_taken_as_installed(tmp_path):
    """The numpy-1 build: the image's packages that ask numpy >= 2 get no stand-in, so pip
    resolves them from the index with their real requirements."""
    present = {"numpy": "2.5.2", "ml-dtypes": "0.6.0", "contourpy": "1.4.0", "torch": "2.11.0"}
    site = tmp_path / "site"
    helper.write_present(present, site, tmp_path / "keep.txt", "torch", "ml-dtypes|contourpy")
    found = {d.metadata["Name"] for d in importlib.metadata.distributions(path=[site])}
    assert found == {"numpy", "torch"}
    assert helper.main(["present", str(_freeze(tmp_path, present)), str(tmp_path / "site2"),
                        str(tmp_path / "keep2.txt"), "torch", "--resolve-again", ""]) == 0
    assert len(list((tmp_path / "site2").iterdir())) == 4  # no regex: every package


def _freeze(tmp_path: Path, present: dict[str, str]) -> Path:
    path = tmp_path / "freeze.txt"
    path.write_text("".join(f"{name}=={version}\n" for name, version in present.items()))
    return path


def _item(name: str, version: str, sha256: str | None = None) -> dict:
    info = {"url": f"https://files.example/{name}-{version}-py3-none-any.whl"}
    if sha256:
        info["archive_info"] = {"hashes": {"sha256": sha256}}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_plan_names_what_it_replaces_and_refuses_a_kept_package():
    report = {"install": [_item("Transformers", "5.12.1", "ab"), _item("sglang", "0.5.15.post1")]}
    present = {"transformers": "5.17.0", "torch": "2.11.0"}
    assert helper.read_plan(report, present, "torch") == [
        helper.Planned("sglang", "0.5.15.post1", None, None),
        helper.Planned("transformers", "5.12.1", "5.17.0", "ab")]
    report["install"].append(_item("torch", "2.12.0"))
    with pytest.raises(helper.WheelhouseError, match=r"replace the image's torch 2\.11\.0 "
                                                     r"\(with 2\.12\.0\)"):
        helper.read_plan(report, present, "torch|triton")


def _wheel(folder: Path, name: str, version: str, size: int) -> str:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(bytes(size))
    return hashlib.sha256(bytes(size)).hexdigest()


def test_manifest_sizes_hashes_and_summary(tmp_path):
    big = _wheel(tmp_path, "sglang_kernel", "0.4.4", 3 * 2**20)
    small = _wheel(tmp_path, "transformers", "5.12.1", 1000)
    plan = [helper.Planned("sglang-kernel", "0.4.4", None, big),
            helper.Planned("transformers", "5.12.1", "5.17.0", None)]
    rows = helper.write_manifest(tmp_path, plan)
    lines = (tmp_path / "MANIFEST.tsv").read_text().splitlines()
    assert lines[0].split("\t") == list(helper.MANIFEST_FIELDS)
    assert lines[1].split("\t") == ["sglang-kernel", "0.4.4", "-",
                                    "sglang_kernel-0.4.4-py3-none-any.whl", str(3 * 2**20), big]
    assert lines[2].split("\t")[2:] == ["5.17.0", "transformers-5.12.1-py3-none-any.whl", "1000",
                                        small]
    text = helper.summary(rows)
    assert text.splitlines()[0] == f"2 wheels, 3 MiB ({3 * 2**20 + 1000} bytes)"
    assert text.index("sglang_kernel") < text.index("transformers-5.12.1")
    assert text.splitlines()[-1] == "replaces the image's: transformers 5.17.0 -> 5.12.1"


@pytest.mark.parametrize(("plan", "message"), [
    ([helper.Planned("dep", "1.0", None, "0" * 64)], "the resolution's file had"),
    ([], "is in no plan"),
    ([helper.Planned("dep", "1.0", None, None), helper.Planned("other", "2", None, None)],
     "planned but not downloaded: other"),
])
def test_manifest_refuses_a_wheelhouse_unlike_the_plan(tmp_path, plan, message):
    _wheel(tmp_path, "dep", "1.0", 10)
    with pytest.raises(helper.WheelhouseError, match=message):
        helper.write_manifest(tmp_path, plan)
    assert not (tmp_path / "MANIFEST.tsv").exists()


def _make_wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    """A minimal pure-Python wheel: enough for pip's resolver to read its metadata."""
    info = f"{name}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                        *(f"Requires-Dist: {r}\n" for r in requires)])
    wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", wheel)
        archive.writestr(f"{info}/RECORD", "")


def test_pip_resolves_against_the_image_offline(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    _make_wheel(index, "app", "1.0", ["dep>=1", "lib==2.0", "kept"])
    for name, version in [("dep", "1.0"), ("dep", "2.0"), ("lib", "2.0"), ("kept", "9.0")]:
        _make_wheel(index, name, version, [])
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("dep==1.5\nlib==1.0\nkept==1.0\n")
    env_dir = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")

    def resolve(keep: str):
        helper.write_present(helper.read_freeze(freeze), site, tmp_path / "keep.txt", keep)
        return run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run",
                    "--no-index", "--find-links", str(index), "-c", str(tmp_path / "keep.txt"),
                    "--report", str(tmp_path / "report.json"), "app"], env=env, timeout=120)

    result = resolve("nothing-kept")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    plan = helper.read_plan(report, helper.read_freeze(freeze), "nothing-kept")
    assert [(p.name, p.version, p.image_version) for p in plan] == [
        ("app", "1.0", None), ("lib", "2.0", "1.0")]  # dep 1.5 and kept 1.0 satisfy: left out
    refused = resolve("lib")  # the image's lib pinned: app cannot be installed
    assert refused.returncode != 0
    assert "lib==1.0" in refused.stdout + refused.stderr


def test_begin_build_skips_a_wheelhouse_of_the_same_inputs(tmp_path):
    dest = tmp_path / "wh"
    dest.mkdir()
    (dest / "requirements.txt").write_text("# header\n# inputs abc123\nx==1\n")
    script = (f'source "{SCRIPT}"; DEST="$1"; begin_build "$2"; '
              'echo "built in $(basename "$(dirname "$HOUSE")")"; test -d "$HOUSE"')
    same = run(["bash", "-c", script, "begin", str(dest), "abc123"])
    assert same.returncode == 0, same.stderr
    assert f"{dest} is up to date (inputs abc123)" in same.stdout
    assert "built in" not in same.stdout
    other = run(["bash", "-c", script, "begin", str(dest), "def456"])
    assert other.returncode == 0, other.stderr
    assert "built in .slime-wheelhouse-build." in other.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]  # the temporary folder removed
