#!/usr/bin/env bash
# Build an offline wheelhouse of the slime stack for a GPU image that already has its torch: the
# wheel closure of SGLang at slime's pin (SGLANG_VERSION, scripts/lib/pins.sh), sglang-router and
# ray (pyproject.toml's pins) and slime's requirements.txt, less what the image already has.
# Usage: scripts/slime_wheelhouse.sh [options] DEST
#   --python-version X.Y  the image's Python (default 3.12). Its interpreter must be on this
#                         machine ($WHEELHOUSE_PYTHON, pyenv's X.Y, or pythonX.Y on PATH), else
#                         exit 1: pip resolves with it, so environment markers are the target's
#   --platform TAG        the image's platform (default manylinux_2_39_x86_64: the H200 image is
#                         Ubuntu 24.04, glibc 2.39); also accepts wheels of every older manylinux
#   --present FILE        the image's `pip freeze` (default scripts/lib/h200_image_freeze.txt, read
#                         on the nvidia-h200 image's /opt/torch/.venv); `name==version` lines count
#   --keep REGEX          the image's packages that must stay as they are, pinned as constraints
#                         (default: torch, its CUDA libraries and triton: see KEEP below)
#   --slime-dir DIR       slime's source (default: the slime/ submodule when checked out, else
#                         $EVOLVING_RL_SLIME_PATH), for its requirements.txt
#   --numpy2              keep SGLang's numpy 2: slime's rollouts run, its Megatron side does not
#                         (by default the closure also takes SLIME_MEGATRON_PINS, scripts/lib/
#                         pins.sh: numpy 1.26.4 and scipy 1.17.1, as slime's image does)
#   --resolve-again A,B   the image's packages resolved again under those pins, from the index
#                         with their real requirements (default: the H200 image's four that ask
#                         numpy >= 2, found by `pip check` of that image rebuilt on the CPU with
#                         numpy 1.26.4: ml-dtypes, opencv-python-headless, tifffile, contourpy)
#   --env-wheels SLIME_WH build the env wheels instead (below), over the slime wheelhouse SLIME_WH
#                         built by this script from the same --present
#   --extras LIST         with --env-wheels: the project's extras (default alfworld,mind2web,
#                         retrieval,local: the env, Mind2Web and retrieval servers, and `local`
#                         for the GGUF model's conversion). A profile's own: retrieval,local for
#                         the probes, mind2web,retrieval,local for web; only alfworld (profiles
#                         alfworld, learn) has sdists to build
# How the image's packages are left out: each `name==version` of --present becomes a dist-info
# holding only its name and version in the venv pip resolves in, so pip takes it as installed:
# kept where its version satisfies the closure (not downloaded), replaced where it does not (the
# wheel is downloaded; MANIFEST.tsv's image_version column says what it replaces). The --keep
# packages are pinned too: a closure that would replace one fails (exit 1) instead.
# Needs the network (PyPI) and the target interpreter; binary wheels only (--only-binary=:all:)
# but for the sdists --env-wheels builds (it needs `strip` too).
# DEST gets the wheels, MANIFEST.tsv (name, version, image_version, filename, size, sha256, why:
# the chain of requirers, e.g. "sglang > xgrammar"), PROVIDED.tsv (name, version, provided_by,
# why: the closure's requirements the image met), requirements.txt (name==version
# --hash=sha256:..., a header naming the inputs) and present.txt (the --present used). The
# summary lists the count, the total size and the largest wheels.
# On the image: python3 -m pip install --no-index --no-deps -r DEST/requirements.txt
#   --find-links DEST (measured: docs/results/2026-12-03-slime-wheelhouse.md).
# The env wheels (--env-wheels SLIME_WH DEST): our own runtime on the slime path, which neither
# the image nor the slime wheelhouse has: the project's wheel (src/ at build time) and the
# closure of evolving_rl[--extras], less the image's packages with SLIME_WH's installed over them
# (all of SLIME_WH's pinned: the closure must not replace one). The sdist-only fast-downward-
# textworld and jericho are taken from the wheels setup_env.sh built on this machine
# (scripts/lib/sdist_wheels.sh: $EVOLVING_RL_WHEELS), else built here (minutes each), and
# stripped (scripts/wheelhouse.sh: pure-Python wheels loading a ctypes library; this machine's
# glibc must be <= the image's). PROVIDED.tsv
# says which requirements the image or SLIME_WH met (gguf: SGLang needs it too). Both installed
# at once on the image: python3 -m pip install --no-index --no-deps --find-links SLIME_WH
#   --find-links DEST -r SLIME_WH/requirements.txt -r DEST/requirements.txt
# Not in it: Megatron-LM (source), TransformerEngine and apex (compiled), slime (source).
# numpy: slime's Megatron side asserts numpy 1.x, SGLang's closure on the image alone keeps numpy 2
# (docs/results/2026-12-03-slime-one-gpu.md); hence SLIME_MEGATRON_PINS unless --numpy2.
# Same inputs (pins, pyproject, slime's requirements, --present, options, this script, its helpers
# and scripts/wheelhouse.sh, whose functions it uses; SLIME_WH's requirements.txt) as DEST's
# requirements.txt: nothing to do. A change of src/ alone rebuilds nothing (remove DEST).
# The header names slime's own commit: its checkout's HEAD, or the commit in the name of a
# `git archive` copy (slime-624b824a), flagged when not the slime/ submodule's pin.
# Built in a temporary folder beside DEST, moved into place only when complete.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/wheelhouse.sh
source "$ROOT/scripts/wheelhouse.sh"  # functions and pins only: its main runs when executed
ME=slime-wheelhouse
HELPER="$ROOT/scripts/lib/slime_wheelhouse.py"

PYV=3.12
PLATFORM=manylinux_2_39_x86_64
PRESENT="$ROOT/scripts/lib/h200_image_freeze.txt"
# torch, the CUDA libraries torch 2.11 pins (nvidia-*, cuda-toolkit, cuda-bindings) and triton.
KEEP='torch|torchvision|torchaudio|triton|nvidia-.+|cuda-toolkit|cuda-bindings'
SLIME_DIR=
DEST=
NUMPY2=0
RESOLVE_AGAIN=ml-dtypes,opencv-python-headless,tifffile,contourpy
SLIME_HOUSE=  # --env-wheels: the slime wheelhouse the env wheels go over
EXTRAS=
OVER=()       # --env-wheels: the helper's --over of the slime wheelhouse's MANIFEST.tsv

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) usage; exit 0 ;;
            --numpy2) NUMPY2=1; shift ;;
            --python-version|--platform|--present|--keep|--slime-dir|--resolve-again|\
            --env-wheels|--extras)
                [ $# -ge 2 ] || die_usage "$1 needs a value"
                case "$1" in
                    --resolve-again) RESOLVE_AGAIN="$2" ;;
                    --python-version) PYV="$2" ;;
                    --platform) PLATFORM="$2" ;;
                    --present) PRESENT="$2" ;;
                    --keep) KEEP="$2" ;;
                    --slime-dir) SLIME_DIR="$2" ;;
                    --env-wheels) SLIME_HOUSE="$2" ;;
                    --extras) EXTRAS="$2" ;;
                esac
                shift 2 ;;
            -*) die_usage "unknown option $1" ;;
            *) set_dest "$1"; shift ;;
        esac
    done
    check_target_args
    [ -f "$PRESENT" ] || die_usage "--present: no file $PRESENT (give the image's pip freeze)"
    [ -n "$KEEP" ] || die_usage "--keep must not be empty (e.g. torch)"
    if [ -n "$SLIME_HOUSE" ]; then check_env_args; else check_slime_args; fi
}

check_slime_args() {  # slime's source, for its requirements.txt
    [ -z "$EXTRAS" ] || die_usage "--extras needs --env-wheels"
    if [ -z "$SLIME_DIR" ]; then
        SLIME_DIR="$ROOT/slime"
        [ -f "$SLIME_DIR/requirements.txt" ] || SLIME_DIR="${EVOLVING_RL_SLIME_PATH:-$SLIME_DIR}"
    fi
    [ -f "$SLIME_DIR/requirements.txt" ] || die_usage "no slime source at $SLIME_DIR (git" \
        "submodule update --init slime, or --slime-dir / \$EVOLVING_RL_SLIME_PATH)"
}

check_env_args() {  # a slime wheelhouse built over the same image; the extras well formed
    EXTRAS="${EXTRAS:-alfworld,mind2web,retrieval,local}"
    [[ "$EXTRAS" =~ ^[a-z0-9_-]+(,[a-z0-9_-]+)*$ ]] || die_usage "--extras: a,b,c, got '$EXTRAS'"
    [ -f "$SLIME_HOUSE/MANIFEST.tsv" ] && [ -f "$SLIME_HOUSE/present.txt" ] ||
        die_usage "--env-wheels: $SLIME_HOUSE is no slime wheelhouse (no MANIFEST.tsv, present.txt)"
    cmp -s "$SLIME_HOUSE/present.txt" "$PRESENT" || die_usage "--env-wheels: $SLIME_HOUSE was" \
        "built over another image than $PRESENT (its present.txt differs)"
    SLIME_HOUSE="$(realpath "$SLIME_HOUSE")"
    OVER=(--over "$SLIME_HOUSE/MANIFEST.tsv")
}

slime_inputs_stamp() {  # what the wheelhouse depends on; equal stamps mean nothing to rebuild
    {
        echo "$PYV $PLATFORM keep=$KEEP numpy2=$NUMPY2 again=$RESOLVE_AGAIN env=$EXTRAS"
        cat "$ROOT/pyproject.toml" "$ROOT/scripts/lib/pins.sh" "$PRESENT" "$0" "$HELPER" \
            "$ROOT/scripts/lib/wheel_closure.py" "$ROOT/scripts/wheelhouse.sh"
        if [ -n "$SLIME_HOUSE" ]; then cat "$SLIME_HOUSE/requirements.txt"
        else cat "$SLIME_DIR/requirements.txt"; fi
    } | sha256sum | cut -c1-16
}

present_image() {  # present_image ARGS...: the image as installed packages in the resolver venv
    local site
    site="$("$RPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    step "the image's packages from $(basename "$PRESENT") $*" "$BPY" "$HELPER" present \
        "$PRESENT" "$site" "$TMP/keep.txt" "$KEEP" "$@"
}

resolve() {  # resolve ARGS...: pip's plan of ARGS against the image, into $TMP/plan.txt
    local platforms
    mapfile -t platforms < <(platform_args)
    step "resolving $* against the image" "$RPY" -m pip install --dry-run --only-binary=:all: \
        --python-version "$PYV" --implementation cp "${platforms[@]}" -c "$TMP/keep.txt" \
        --report "$TMP/report.json" "$@"
    "$BPY" "$HELPER" plan "$TMP/report.json" "$PRESENT" "$KEEP" "${OVER[@]}" \
        --provided "$HOUSE/PROVIDED.tsv" >"$TMP/plan.txt" 2>>"$LOG" ||
        die "the plan: $(tail -n 1 "$LOG")"
}

plan_slime() {  # SGLang, its router, ray and slime's requirements (+ the Megatron-side pins)
    local again=() megatron=()
    if [ "$NUMPY2" = 0 ]; then  # slime's Megatron-side pins, and the image's packages they contradict
        read -ra megatron <<<"$SLIME_MEGATRON_PINS"
        IFS=, read -ra again <<<"$RESOLVE_AGAIN"
    fi
    present_image --resolve-again "$(IFS='|'; echo "${again[*]}")"
    resolve "sglang==$SGLANG_VERSION" "$(project_requirement sglang-router)" \
        "$(project_requirement ray)" -r "$SLIME_DIR/requirements.txt" "${megatron[@]}" \
        "${again[@]}"
}

plan_env() {  # the project's wheel and the sdist-only ones built here, then evolving_rl[EXTRAS]
    local made="$TMP/local" wheel name project prebuilt=()
    mkdir -p "$made" "$TMP/sdists"
    build_project_wheel
    mv "$HOUSE"/evolving_rl-*.whl "$made/"
    if [[ ",$EXTRAS," == *",alfworld,"* ]]; then
        for name in "${ALFWORLD_SDISTS[@]}"; do prebuilt+=("$(project_requirement "$name")"); done
        build_sdists "$TMP/sdists" "${prebuilt[@]}"
        for wheel in "$TMP"/sdists/*.whl; do strip_wheel "$wheel" "$made"; done
    fi
    project="$(basename "$made"/evolving_rl-*.whl | cut -d- -f2)"
    present_image "${OVER[@]}"
    resolve --find-links "$made" "evolving_rl[$EXTRAS]==$project"
}

fetch_planned() {  # the plan's wheels into HOUSE: the index's downloaded, those built here copied
    local name version source platforms wheels=()
    while IFS=$'\t' read -r name version _ _ source _; do  # image version, sha256, why: unused
        if [ "$source" = index ]; then wheels+=("$name==$version"); else cp "$source" "$HOUSE/"; fi
    done <"$TMP/plan.txt"
    [ ${#wheels[@]} -gt 0 ] || return 0
    mapfile -t platforms < <(platform_args)
    step "downloading ${#wheels[@]} wheels for cp${PYV/./} on $PLATFORM" "$RPY" -m pip download \
        --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
        "${platforms[@]}" -d "$HOUSE" "${wheels[@]}"
}

requirements_header() {  # what was built from what, and the command that installs it
    local when taken
    when="$(date -u +%Y-%m-%dT%H:%MZ)"
    if [ -n "$SLIME_HOUSE" ]; then
        echo "# scripts/slime_wheelhouse.sh --env-wheels $when: Python $PYV, $PLATFORM," \
            "evolving_rl[$EXTRAS] (its wheel and the sdist-only ones), less the" \
            "image's packages in present.txt and the slime wheelhouse $SLIME_HOUSE"
        echo "# inputs $STAMP"
        echo "# offline, with that slime wheelhouse (S), into the image's Python: python3 -m pip"
        echo "#   install --no-index --no-deps --find-links S --find-links <this folder>"
        echo "#   -r S/requirements.txt -r <this folder>/requirements.txt"
        taken="$(from_slime_house)"
        [ -z "$taken" ] || echo "# not without S, which gives it $taken and what they need" \
            "(PROVIDED.tsv)"
    else
        echo "# scripts/slime_wheelhouse.sh $when: Python $PYV, $PLATFORM, SGLang" \
            "$SGLANG_VERSION, slime $("$BPY" "$HELPER" slime-label "$SLIME_DIR" "$ROOT")," \
            "less the image's packages in present.txt"
        echo "# inputs $STAMP"
        echo "# offline, into the image's Python: python3 -m pip install --no-index --no-deps"
        echo "#   --find-links <this folder> -r <this folder>/requirements.txt"
    fi
}

from_slime_house() {  # "name version, ..." of the env wheels' requirements the slime wheelhouse met
    awk -F'\t' 'NR > 1 && $3 == "slime-wheelhouse" { printf "%s%s %s", sep, $1, $2; sep = ", " }' \
        "$HOUSE/PROVIDED.tsv"
}

write_requirements() {  # requirements.txt: hash-pinned name==version of each wheel, a header
    {
        requirements_header
        awk -F'\t' 'NR > 1 { print $1 "==" $2 " --hash=sha256:" $6 }' "$HOUSE/MANIFEST.tsv"
    } >"$HOUSE/requirements.txt"
}

make_venvs() {  # the tools venv (BPY: the helper, the builds) and the resolver's (RPY: the image)
    BPY="$TMP/tools/bin/python"
    RPY="$TMP/resolver/bin/python"
    step "creating the tools venv" "$1" -m venv "$TMP/tools"
    step "installing its tools" "$BPY" -m pip install packaging "setuptools>=68" wheel
    step "creating the resolver venv" "$1" -m venv "$TMP/resolver"
    step "updating its pip" "$RPY" -m pip install --upgrade pip
}

main() {
    parse_args "$@"
    DEST="$(realpath -m "$DEST")"
    PRESENT="$(realpath "$PRESENT")"
    if [ -n "$SLIME_HOUSE" ]; then
        command -v strip >/dev/null || die "strip (binutils) is needed to shrink the built wheels"
    fi
    local python
    python="$(target_python)" || exit 1
    begin_build "$(slime_inputs_stamp)"
    progress "building $DEST with $python (inputs $STAMP); log: $LOG"
    make_venvs "$python"
    if [ -n "$SLIME_HOUSE" ]; then plan_env; else plan_slime; fi
    fetch_planned
    "$BPY" "$HELPER" manifest "$HOUSE" "$TMP/plan.txt" >"$TMP/summary.txt" 2>>"$LOG" ||
        die "manifest: $(tail -n 3 "$LOG")"
    write_requirements
    cp "$PRESENT" "$HOUSE/present.txt"
    if [ -e "$DEST" ]; then mv "$DEST" "$TMP/previous"; fi
    mv "$HOUSE" "$DEST"
    progress "done: $DEST"
    cat "$TMP/summary.txt"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi  # sourced (the tests): functions only
