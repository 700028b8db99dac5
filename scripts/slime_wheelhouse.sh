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
# How the image's packages are left out: each `name==version` of --present becomes a dist-info
# holding only its name and version in the venv pip resolves in, so pip takes it as installed:
# kept where its version satisfies the closure (not downloaded), replaced where it does not (the
# wheel is downloaded; MANIFEST.tsv's image_version column says what it replaces). The --keep
# packages are pinned too: a closure that would replace one fails (exit 1) instead.
# Needs the network (PyPI) and the target interpreter; binary wheels only (--only-binary=:all:).
# DEST gets the wheels, MANIFEST.tsv (name, version, image_version, filename, size, sha256),
# requirements.txt (name==version --hash=sha256:..., a header naming the inputs) and present.txt
# (the --present used). The summary lists the count, the total size and the largest wheels.
# On the image: python3 -m pip install --no-index --no-deps -r DEST/requirements.txt
#   --find-links DEST (measured: docs/results/2026-12-03-slime-wheelhouse.md).
# Not in it: Megatron-LM (source), TransformerEngine and apex (compiled), slime (source).
# numpy: slime's Megatron side asserts numpy 1.x, SGLang's closure on the image alone keeps numpy 2
# (docs/results/2026-12-03-slime-one-gpu.md); hence SLIME_MEGATRON_PINS unless --numpy2.
# Same inputs (pins, pyproject, slime's requirements, --present, options, this script, its helper
# and scripts/wheelhouse.sh, whose functions it uses) as DEST's requirements.txt: nothing to do.
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

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) usage; exit 0 ;;
            --numpy2) NUMPY2=1; shift ;;
            --python-version|--platform|--present|--keep|--slime-dir|--resolve-again)
                [ $# -ge 2 ] || die_usage "$1 needs a value"
                case "$1" in
                    --resolve-again) RESOLVE_AGAIN="$2" ;;
                    --python-version) PYV="$2" ;;
                    --platform) PLATFORM="$2" ;;
                    --present) PRESENT="$2" ;;
                    --keep) KEEP="$2" ;;
                    --slime-dir) SLIME_DIR="$2" ;;
                esac
                shift 2 ;;
            -*) die_usage "unknown option $1" ;;
            *) set_dest "$1"; shift ;;
        esac
    done
    check_target_args
    [ -f "$PRESENT" ] || die_usage "--present: no file $PRESENT (give the image's pip freeze)"
    [ -n "$KEEP" ] || die_usage "--keep must not be empty (e.g. torch)"
    if [ -z "$SLIME_DIR" ]; then
        SLIME_DIR="$ROOT/slime"
        [ -f "$SLIME_DIR/requirements.txt" ] || SLIME_DIR="${EVOLVING_RL_SLIME_PATH:-$SLIME_DIR}"
    fi
    [ -f "$SLIME_DIR/requirements.txt" ] || die_usage "no slime source at $SLIME_DIR (git" \
        "submodule update --init slime, or --slime-dir / \$EVOLVING_RL_SLIME_PATH)"
}

slime_inputs_stamp() {  # what the wheelhouse depends on; equal stamps mean nothing to rebuild
    {
        echo "$PYV $PLATFORM keep=$KEEP numpy2=$NUMPY2 again=$RESOLVE_AGAIN"
        cat "$ROOT/pyproject.toml" "$ROOT/scripts/lib/pins.sh" "$SLIME_DIR/requirements.txt" \
            "$PRESENT" "$0" "$HELPER" "$ROOT/scripts/wheelhouse.sh"
    } | sha256sum | cut -c1-16
}

resolve_and_fetch() {  # the image as installed packages, pip's plan against it, the downloads
    local site platforms wanted name version rest
    local again=() megatron=()
    if [ "$NUMPY2" = 0 ]; then  # slime's Megatron-side pins, and the image's packages they contradict
        read -ra megatron <<<"$SLIME_MEGATRON_PINS"
        IFS=, read -ra again <<<"$RESOLVE_AGAIN"
    fi
    site="$("$BPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    step "the image's packages from $(basename "$PRESENT")" "$BPY" "$HELPER" present \
        "$PRESENT" "$site" "$TMP/keep.txt" "$KEEP" --resolve-again "$(IFS='|'; echo "${again[*]}")"
    mapfile -t platforms < <(platform_args)
    wanted=("sglang==$SGLANG_VERSION" "$(project_requirement sglang-router)"
        "$(project_requirement ray)" -r "$SLIME_DIR/requirements.txt" "${megatron[@]}" "${again[@]}")
    step "resolving ${wanted[*]} against the image" "$BPY" -m pip install --dry-run \
        --only-binary=:all: --python-version "$PYV" --implementation cp "${platforms[@]}" \
        -c "$TMP/keep.txt" --report "$TMP/report.json" "${wanted[@]}"
    "$BPY" "$HELPER" plan "$TMP/report.json" "$PRESENT" "$KEEP" >"$TMP/plan.txt" 2>>"$LOG" ||
        die "the plan: $(tail -n 1 "$LOG")"
    local wheels=()
    while read -r name version rest; do wheels+=("$name==$version"); done <"$TMP/plan.txt"
    step "downloading ${#wheels[@]} wheels for cp${PYV/./} on $PLATFORM" "$BPY" -m pip download \
        --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
        "${platforms[@]}" -d "$HOUSE" "${wheels[@]}"
}

write_requirements() {  # requirements.txt: hash-pinned name==version of each wheel, a header
    {
        echo "# scripts/slime_wheelhouse.sh $(date -u +%Y-%m-%dT%H:%MZ): Python $PYV, $PLATFORM," \
            "SGLang $SGLANG_VERSION, slime $(git -C "$SLIME_DIR" rev-parse --short=8 HEAD \
            2>/dev/null || basename "$SLIME_DIR"), less the image's packages in present.txt"
        echo "# inputs $STAMP"
        echo "# offline, into the image's Python: python3 -m pip install --no-index --no-deps"
        echo "#   --find-links <this folder> -r <this folder>/requirements.txt"
        awk -F'\t' 'NR > 1 { print $1 "==" $2 " --hash=sha256:" $6 }' "$HOUSE/MANIFEST.tsv"
    } >"$HOUSE/requirements.txt"
}

main() {
    parse_args "$@"
    DEST="$(realpath -m "$DEST")"
    PRESENT="$(realpath "$PRESENT")"
    local python
    python="$(target_python)" || exit 1
    begin_build "$(slime_inputs_stamp)"
    BPY="$TMP/resolver/bin/python"
    progress "building $DEST with $python (inputs $STAMP); log: $LOG"
    step "creating the resolver venv" "$python" -m venv "$TMP/resolver"
    step "updating its pip" "$BPY" -m pip install --upgrade pip
    resolve_and_fetch
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
