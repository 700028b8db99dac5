"""scripts/slime_wheelhouse.sh and its helpers scripts/lib/slime_wheelhouse.py and
scripts/lib/wheel_closure.py, with no network.

The script's syntax, `--help`, and its answers to bad arguments (exit 2, a message naming the
mistake) and to a missing target interpreter (exit 1, nothing written); a DEST built from the
same inputs is left alone, another build starts in a temporary folder. The helper: the image's
freeze read and written as dist-infos pip takes for installed packages, the plan read from pip's
report (what the image has at another version is named; replacing a kept package is refused),
the manifest's sizes and hashes checked against the plan. One test runs pip's real resolver,
offline on hand-made wheels, against such an image: a package the image has at a satisfying
version is not planned, one at another version is, and a kept one pinned makes it fail; another
does the same for the env wheels over a slime wheelhouse. The env wheels' chains (why each
package is in the closure, which requirements the image or the slime wheelhouse met) and the
requirements' header naming slime's own commit, not that of a repository holding its folder.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slime_wheelhouse.sh"
LIB = ROOT / "scripts" / "lib"
HELPER_PATH = LIB / "slime_wheelhouse.py"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, LIB / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up; the helper imports closure
    spec.loader.exec_module(module)
    return module


closure = _load("wheel_closure")
helper = _load("slime_wheelhouse")


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


def _item(name: str, version: str, sha256: str | None = None, requires: tuple[str, ...] = (),
          requested: bool = False, extras: tuple[str, ...] = (), url: str = "") -> dict:
    info = {"url": url or f"https://files.example/{name}-{version}-py3-none-any.whl"}
    if sha256:
        info["archive_info"] = {"hashes": {"sha256": sha256}}
    item = {"metadata": {"name": name, "version": version, "requires_dist": list(requires)},
            "download_info": info, "requested": requested}
    if extras:
        item["requested_extras"] = list(extras)
    return item


ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
               "platform_machine": "x86_64", "implementation_name": "cpython", "os_name": "posix",
               "platform_system": "Linux", "platform_python_implementation": "CPython",
               "platform_release": "", "platform_version": "", "implementation_version": "3.12.3"}


def test_plan_names_what_it_replaces_and_refuses_a_kept_package():
    report = {"install": [_item("Transformers", "5.12.1", "ab"),
                          _item("sglang", "0.5.15.post1", requires=("transformers==5.12.1",),
                                requested=True)], "environment": ENVIRONMENT}
    present = {"transformers": "5.17.0", "torch": "2.11.0"}
    assert helper.read_plan(report, present, "torch") == [
        helper.Planned("sglang", "0.5.15.post1", None, None, "index", "requested"),
        helper.Planned("transformers", "5.12.1", "5.17.0", "ab", "index", "sglang")]
    report["install"].append(_item("torch", "2.12.0"))
    with pytest.raises(helper.WheelhouseError, match=r"replace the image's torch 2\.11\.0 "
                                                     r"\(with 2\.12\.0\)"):
        helper.read_plan(report, present, "torch|triton")


def _project_report() -> dict:
    """evolving_rl[alfworld,local] as pip reports it: extras requiring its own extras, markers."""
    project = _item("evolving_rl", "0.1.0", requires=(
        "pyyaml>=6.0", 'evolving_rl[serve]; extra == "alfworld"',
        'alfworld==0.4.2; extra == "alfworld"', 'flask>=3.0; extra == "serve"',
        'gguf>=0.10; extra == "local"', 'transformers<6,>=5.0; extra == "local"',
        'pywin32; sys_platform == "win32" and extra == "alfworld"', 'ijson; extra == "mind2web"'),
        requested=True, extras=("alfworld", "local"), url="file:///tmp/built/evolving_rl-0.1.0-"
        "py3-none-any.whl")
    return {"environment": ENVIRONMENT, "install": [
        project, _item("alfworld", "0.4.2", requires=("textworld==1.7.0", "numpy>=1.2")),
        _item("textworld", "1.7.0", requires=("tatsu==5.8.3", "jericho[full]>=3.0")),
        _item("tatsu", "5.8.3"), _item("Flask", "3.1.0", requires=("click>=8",)),
        _item("click", "8.2.0"), _item("jericho", "3.3.0", requires=('spacy; extra == "full"',)),
        _item("spacy", "3.8.0")]}


def test_closure_explains_each_package_and_what_was_provided():
    found = closure.explain(_project_report(), {"pyyaml", "numpy", "gguf", "transformers"})
    assert found.why == {
        "evolving-rl": "requested", "alfworld": "evolving-rl[alfworld]",
        "flask": "evolving-rl[serve]", "textworld": "evolving-rl[alfworld] > alfworld",
        "click": "evolving-rl[serve] > flask",
        "tatsu": "evolving-rl[alfworld] > alfworld > textworld",
        "jericho": "evolving-rl[alfworld] > alfworld > textworld",
        "spacy": "evolving-rl[alfworld] > alfworld > textworld > jericho[full]"}
    assert found.provided == {"pyyaml": "evolving-rl", "gguf": "evolving-rl[local]",
                              "transformers": "evolving-rl[local]",
                              "numpy": "evolving-rl[alfworld] > alfworld"}


def test_env_plan_less_the_slime_wheelhouse(tmp_path):
    """The slime wheelhouse's packages count as installed over the image's, are pinned, and
    the plan names the local wheels, the chains and what each of the two provided."""
    freeze = _freeze(tmp_path, {"numpy": "2.5.2", "pyyaml": "6.0.3", "torch": "2.11.0"})
    manifest = tmp_path / "slime" / helper.MANIFEST
    manifest.parent.mkdir()
    manifest.write_text("name\tversion\n" "numpy\t1.26.4\n" "gguf\t0.19.0\n"
                        "transformers\t5.12.1\n")
    present, over = helper.read_present(freeze, manifest)
    assert present == {"numpy": "1.26.4", "pyyaml": "6.0.3", "torch": "2.11.0",
                       "gguf": "0.19.0", "transformers": "5.12.1"}
    helper.write_present(present, tmp_path / "site", tmp_path / "keep.txt", "torch", "", over)
    assert (tmp_path / "keep.txt").read_text().splitlines() == [
        "gguf==0.19.0", "numpy==1.26.4", "torch==2.11.0", "transformers==5.12.1"]
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_project_report()))
    provided = tmp_path / helper.PROVIDED
    planned = _main_output(["plan", str(report), str(freeze), "torch", "--over", str(manifest),
                            "--provided", str(provided)])
    plan = helper.read_plan_file(planned)
    assert [p.name for p in plan] == ["alfworld", "click", "evolving-rl", "flask", "jericho",
                                      "spacy", "tatsu", "textworld"]
    assert plan[2].source == "/tmp/built/evolving_rl-0.1.0-py3-none-any.whl"
    assert plan[7] == helper.Planned("textworld", "1.7.0", None, None, "index",
                                     "evolving-rl[alfworld] > alfworld")
    assert provided.read_text().splitlines() == [
        "name\tversion\tprovided_by\twhy", "gguf\t0.19.0\tslime-wheelhouse\tevolving-rl[local]",
        "numpy\t1.26.4\tslime-wheelhouse\tevolving-rl[alfworld] > alfworld",
        "pyyaml\t6.0.3\timage\tevolving-rl",
        "transformers\t5.12.1\tslime-wheelhouse\tevolving-rl[local]"]
    report.write_text(json.dumps({"environment": ENVIRONMENT, "install": [
        _item("gguf", "0.20.0", requested=True)]}))
    with pytest.raises(helper.WheelhouseError, match=r"replace the image's gguf 0\.19\.0"):
        helper.read_plan(json.loads(report.read_text()), present, "torch", over)


def _main_output(argv: list[str]) -> Path:
    """Runs the helper's main as the shell does, its stdout kept in a file."""
    out = Path(argv[1]).parent / "plan.txt"
    result = run([sys.executable, str(HELPER_PATH), *argv])
    assert result.returncode == 0, result.stderr
    out.write_text(result.stdout)
    return out


def _wheel(folder: Path, name: str, version: str, size: int) -> str:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(bytes(size))
    return hashlib.sha256(bytes(size)).hexdigest()


def test_manifest_sizes_hashes_and_summary(tmp_path):
    big = _wheel(tmp_path, "sglang_kernel", "0.4.4", 3 * 2**20)
    small = _wheel(tmp_path, "transformers", "5.12.1", 1000)
    plan = [helper.Planned("sglang-kernel", "0.4.4", None, big, "index", "sglang > xgrammar"),
            helper.Planned("transformers", "5.12.1", "5.17.0", None, "index", "requested")]
    rows = helper.write_manifest(tmp_path, plan)
    lines = (tmp_path / "MANIFEST.tsv").read_text().splitlines()
    assert lines[0].split("\t") == list(helper.MANIFEST_FIELDS)
    assert lines[1].split("\t") == ["sglang-kernel", "0.4.4", "-",
                                    "sglang_kernel-0.4.4-py3-none-any.whl", str(3 * 2**20), big,
                                    "sglang > xgrammar"]
    assert lines[2].split("\t")[2:] == ["5.17.0", "transformers-5.12.1-py3-none-any.whl", "1000",
                                        small, "requested"]
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
    python = _bare_venv(tmp_path / "image")
    site = _purelib(python)

    def resolve(keep: str):
        helper.write_present(helper.read_freeze(freeze), site, tmp_path / "keep.txt", keep)
        return run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run",
                    "--no-index", "--find-links", str(index), "-c", str(tmp_path / "keep.txt"),
                    "--report", str(tmp_path / "report.json"), "app"], env=_pip_env(),
                   timeout=120)

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


@pytest.mark.parametrize("cached", [(), (0,), (0, 1)])
def test_the_sdist_wheels_setup_env_built_are_taken_not_compiled_again(cached, tmp_path):
    """build_sdists (both wheelhouse scripts): each sdist-only pin whose wheel setup_env.sh
    built into EVOLVING_RL_WHEELS is copied; pip compiles only the others. An --env-wheels
    build once spent 669 of its 742 s compiling them again (issue 59 section 4)."""
    pins = re.search(r'^SDIST_ONLY="([^"]+)"', (LIB / "pins.sh").read_text(), re.M)[1].split()
    cache, out, calls = tmp_path / "cache", tmp_path / "out", tmp_path / "calls"
    cache.mkdir()
    wheels = [pin.replace("-", "_").replace("==", "-") + "-py3-none-any.whl" for pin in pins]
    for i in cached:
        (cache / wheels[i]).write_text(pins[i])
    old = pins[0].replace("-", "_").split("==")[0] + "-0.1-py3-none-any.whl"
    (cache / old).write_text("another version")
    pip = tmp_path / "python"
    pip.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n')
    pip.chmod(0o755)
    script = (f'source "{SCRIPT}"; LOG="$1" BPY="$2"; build_sdists "$3" "${{@:4}}"')
    done = run(["bash", "-c", script, "build", str(tmp_path / "log"), str(pip), str(out), *pins],
               env={**os.environ, "EVOLVING_RL_WHEELS": str(cache)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(wheels[i] for i in cached)
    left = [pin for i, pin in enumerate(pins) if i not in cached]
    expected = [f"-m pip wheel --no-deps -w {out} {' '.join(left)}"] if left else []
    assert (calls.read_text().splitlines() if calls.exists() else []) == expected


def test_pip_resolves_the_env_wheels_over_the_slime_wheelhouse_offline(tmp_path):
    """The slime wheelhouse's dep 2.0 replaces the image's 1.0 and is pinned: an app asking
    dep>=2 plans only itself, one asking dep<2 cannot be resolved (never a second dep)."""
    index = tmp_path / "index"
    index.mkdir()
    _make_wheel(index, "app", "1.0", ["dep>=2"])
    _make_wheel(index, "old", "1.0", ["dep<2"])
    for version in ("1.0", "2.0"):
        _make_wheel(index, "dep", version, [])
    freeze = _freeze(tmp_path, {"dep": "1.0"})
    manifest = tmp_path / helper.MANIFEST
    manifest.write_text("name\tversion\ndep\t2.0\n")
    python = _bare_venv(tmp_path / "image")
    site = _purelib(python)
    assert helper.main(["present", str(freeze), str(site), str(tmp_path / "keep.txt"), "torch",
                        "--over", str(manifest)]) == 0

    def resolve(name: str):
        return run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run",
                    "--no-index", "--find-links", str(index), "-c", str(tmp_path / "keep.txt"),
                    "--report", str(tmp_path / "report.json"), name], env=_pip_env(),
                   timeout=120)

    assert resolve("app").returncode == 0
    report = json.loads((tmp_path / "report.json").read_text())
    present, over = helper.read_present(freeze, manifest)
    assert [(p.name, p.why) for p in helper.read_plan(report, present, "torch", over)] == [
        ("app", "requested")]
    refused = resolve("old")
    assert refused.returncode != 0
    assert "dep==2.0" in refused.stdout + refused.stderr


def _bare_venv(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


def _purelib(python: Path) -> Path:
    return Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                     "['purelib'])"]).stdout.strip())


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c",
                           "user.email=t@example.org", *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def _repo(folder: Path) -> str:
    """A git repository at `folder` with one commit; its short HEAD."""
    folder.mkdir(parents=True, exist_ok=True)
    _git(folder, "init", "-q")
    _git(folder, "commit", "-q", "--allow-empty", "-m", "one")
    return _git(folder, "rev-parse", "--short=8", "HEAD")


@pytest.fixture
def outer(tmp_path: Path) -> tuple[Path, str]:
    """A repository that holds slime folders without being slime."""
    return tmp_path / "outer", _repo(tmp_path / "outer")


def test_slime_label_is_slime_s_own_commit(tmp_path, outer):
    folder, outer_head = outer
    pin = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD:slime"], capture_output=True,
                         text=True, check=False).stdout.strip()[:8]
    copy = folder / "slime-624b824a"  # a git archive copy
    copy.mkdir()
    assert helper.slime_label(copy, ROOT) == (
        "624b824a" if pin in ("", "624b824a") else f"624b824a (not the pin {pin})")
    plain = folder / "slime"
    plain.mkdir()
    assert helper.slime_label(plain, ROOT) == f"of unknown commit ({plain} is no git checkout)"
    checkout = tmp_path / "checkout"
    head = _repo(checkout)
    assert helper.slime_label(checkout, checkout) == head  # no slime submodule there: no pin
    assert helper.slime_label(checkout, ROOT).startswith(head)
    assert outer_head not in helper.slime_label(copy, ROOT) + helper.slime_label(plain, ROOT)


def test_requirements_header_names_slime_not_the_repository_holding_it(outer):
    """Gap 6: the header's slime label came from the repository holding the slime folder."""
    folder, outer_head = outer
    house = folder / "house"
    (folder / "slime").mkdir()
    house.mkdir()
    (house / helper.MANIFEST).write_text("\t".join(helper.MANIFEST_FIELDS) + "\n"
                                         "dep\t1.0\t-\tdep-1.0-py3-none-any.whl\t3\tab12\tsglang\n")
    script = (f'source "{SCRIPT}"; HOUSE="$1" SLIME_DIR="$2" BPY="{sys.executable}" '
              'STAMP=abc; write_requirements; cat "$HOUSE/requirements.txt"')
    result = run(["bash", "-c", script, "header", str(house), str(folder / "slime")])
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert outer_head not in header
    assert f"slime of unknown commit ({folder / 'slime'} is no git checkout)" in header
    assert result.stdout.splitlines()[1:] == [
        "# inputs abc", "# offline, into the image's Python: python3 -m pip install --no-index "
        "--no-deps", "#   --find-links <this folder> -r <this folder>/requirements.txt",
        "dep==1.0 --hash=sha256:ab12"]


@pytest.mark.parametrize(("args", "message"), [
    (["--extras", "alfworld", "dest"], "--extras needs --env-wheels"),
    (["--env-wheels", "/nonexistent", "dest"], "/nonexistent is no slime wheelhouse"),
    (["--env-wheels", "{house}", "--extras", "a b", "dest"], "--extras: a,b,c"),
    (["--env-wheels", "{house}", "--present", "{other}", "dest"], "built over another image"),
])
def test_env_wheels_argument_errors(args, message, tmp_path, slime_dir):
    house = tmp_path / "house"
    house.mkdir()
    (house / helper.MANIFEST).write_text("name\tversion\n")
    (house / "present.txt").write_text((ROOT / "scripts/lib/h200_image_freeze.txt").read_text())
    (tmp_path / "other.txt").write_text("torch==2.11.0\n")
    filled = [a.format(house=house, other=tmp_path / "other.txt") for a in args]
    result = run(["bash", str(SCRIPT), "--slime-dir", str(slime_dir), *filled])
    assert result.returncode == 2
    assert message in result.stderr


def test_plan_file_round_trip(tmp_path):
    plan = [helper.Planned("a", "1", None, None, "/tmp/x y/a-1-py3-none-any.whl",
                           "evolving-rl[alfworld] > alfworld"),
            helper.Planned("b", "2", "1", "ff", "index", "requested")]
    path = tmp_path / "plan.txt"
    path.write_text("".join(helper.plan_line(p) + "\n" for p in plan))
    assert helper.read_plan_file(path) == plan


@pytest.mark.parametrize("taken", [True, False])
def test_the_env_wheels_header_names_what_only_the_slime_wheelhouse_gives(taken, tmp_path):
    """Issue 59 section 4: the env wheels alone lacked gguf (the GGUF conversion), pydantic,
    prompt-toolkit and smart-open, which their closure took from the slime wheelhouse."""
    house = tmp_path / "house"
    house.mkdir()
    (house / helper.MANIFEST).write_text("\t".join(helper.MANIFEST_FIELDS) + "\n")
    rows = [("numpy", "1.26.4", "image", "evolving-rl > gguf")]
    if taken:
        rows += [("gguf", "0.19.0", "slime-wheelhouse", "evolving-rl"),
                 ("pydantic", "2.12.5", "slime-wheelhouse", "evolving-rl > spacy")]
    (house / helper.PROVIDED).write_text("\n".join(
        "\t".join(row) for row in [helper.PROVIDED_FIELDS, *rows]) + "\n")
    script = ('source "$1"; HOUSE="$2" SLIME_HOUSE=/s STAMP=abc EXTRAS=local; '
              'write_requirements; cat "$HOUSE/requirements.txt"')
    result = run(["bash", "-c", script, "header", str(SCRIPT), str(house)])
    assert result.returncode == 0, result.stderr
    named = [line for line in result.stdout.splitlines() if line.startswith("# not without S")]
    assert named == (["# not without S, which gives it gguf 0.19.0, pydantic 2.12.5 and what "
                      "they need (PROVIDED.tsv)"] if taken else [])
