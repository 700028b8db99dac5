#!/usr/bin/env bash
# Make the upstream sources a slime run imports, at the project's pins: slime (the submodule at
# slime/, commit 624b824a) and Megatron-LM at the commit slime's Dockerfile names
# (MEGATRON_COMMIT, slime docker/Dockerfile:7 at the pin: 1dcf0daf) with slime's two patches
# applied as that Dockerfile does (docker/Dockerfile:116-133: megatron.patch, then
# megatron-sglang-aligned.patch, each `git apply --3way`). slime's image has both already
# (/root/slime, /root/Megatron-LM): there, point SLIME_DIR / MEGATRON_DIR at them instead.
#
# Usage: scripts/upstream_sources.sh [--slime-dir DIR] [--megatron-dir DIR]
#   --slime-dir DIR     default slime (the submodule: `git submodule update --init slime`);
#                       another folder is cloned from SLIME_URL at the submodule's commit when
#                       absent; a git checkout must be at that commit
#   --megatron-dir DIR  default upstream/Megatron-LM (ignored by git)
# Environment: SLIME_URL [https://github.com/THUDM/slime.git]
#              MEGATRON_URL [https://github.com/NVIDIA/Megatron-LM.git]
# Needs git and the network. Idempotent: a folder already at its commit (Megatron: with the
# stamp .evolving_rl_patched naming the commit and patches) is left as it is.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
SLIME_DIR=slime
MEGATRON_DIR=upstream/Megatron-LM
SLIME_URL="${SLIME_URL:-https://github.com/THUDM/slime.git}"
MEGATRON_URL="${MEGATRON_URL:-https://github.com/NVIDIA/Megatron-LM.git}"
PATCHES=(megatron.patch megatron-sglang-aligned.patch)
die() { echo "upstream_sources: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --slime-dir|--megatron-dir) [ $# -ge 2 ] || die "$1 needs a value"
            if [ "$1" = --slime-dir ]; then SLIME_DIR="$2"; else MEGATRON_DIR="$2"; fi
            shift 2 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

SLIME_PIN="$(git ls-tree HEAD slime | awk '{print $3}')"
[ -n "$SLIME_PIN" ] || die "no slime submodule in this checkout's HEAD"
if [ "$SLIME_DIR" = slime ]; then
    git submodule update --init slime
elif [ ! -e "$SLIME_DIR/train.py" ]; then
    git clone --quiet "$SLIME_URL" "$SLIME_DIR"
    git -C "$SLIME_DIR" checkout --quiet "$SLIME_PIN"
fi
if [ -e "$SLIME_DIR/.git" ]; then
    actual="$(git -C "$SLIME_DIR" rev-parse HEAD)"
    [ "$actual" = "$SLIME_PIN" ] || die "$SLIME_DIR is at $actual, not the pin $SLIME_PIN"
    echo "slime $SLIME_PIN in $SLIME_DIR"
else  # e.g. a `git archive` of the pin: its commit cannot be read, its Dockerfile is used
    echo "slime in $SLIME_DIR (no git checkout: its commit is not checked; the pin is $SLIME_PIN)"
fi

MEGATRON_PIN="$(sed -n 's/^ARG MEGATRON_COMMIT=//p' "$SLIME_DIR/docker/Dockerfile")"
[ -n "$MEGATRON_PIN" ] || die "$SLIME_DIR/docker/Dockerfile names no MEGATRON_COMMIT"
STAMP="$MEGATRON_PIN ${PATCHES[*]}"
if [ -f "$MEGATRON_DIR/.evolving_rl_patched" ] \
        && [ "$(cat "$MEGATRON_DIR/.evolving_rl_patched")" = "$STAMP" ]; then
    echo "Megatron-LM $MEGATRON_PIN with slime's patches already in $MEGATRON_DIR"
    exit 0
fi
[ ! -e "$MEGATRON_DIR" ] || die "$MEGATRON_DIR exists without our stamp: remove it, or use it as" \
    "MEGATRON_DIR if it is slime's image's /root/Megatron-LM"
git clone --quiet "$MEGATRON_URL" "$MEGATRON_DIR"
git -C "$MEGATRON_DIR" checkout --quiet "$MEGATRON_PIN"
for patch in "${PATCHES[@]}"; do
    git -C "$MEGATRON_DIR" apply --3way "$(realpath "$SLIME_DIR/docker/patch/latest/$patch")" \
        || die "slime's $patch did not apply to Megatron-LM $MEGATRON_PIN"
done
echo "$STAMP" > "$MEGATRON_DIR/.evolving_rl_patched"
echo "Megatron-LM $MEGATRON_PIN with ${PATCHES[*]} in $MEGATRON_DIR"
