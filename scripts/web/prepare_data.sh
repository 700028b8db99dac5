#!/usr/bin/env bash
# Prepare Mind2Web prompt datasets; optionally generate synthetic tasks first.
# Usage: scripts/web/prepare_data.sh [--generate [--tasks N] [--seed S] [--distractors D]]
#                                    [--data-root DIR] [--config configs/web.yaml]
#   --generate   write synthetic tasks in the official layout into the data root (the CPU
#                profile's data; the test zip gets $MIND2WEB_ZIP_PASSWORD or the generator's
#                default password, and preparation uses the same)
#   --data-root  the official layout's root (default: $MIND2WEB_DATA, then mind2web.data_root),
#                i.e. the folder holding data/train/*.json (or train/*.json) and the test zip
# The official test zip needs MIND2WEB_ZIP_PASSWORD (the password on the dataset card).
# Output: <mind2web.prepared_dir>/{train,test_task,test_website,test_domain,all}.jsonl
# EVOLVING_RL_SETUP=skip installs nothing and runs $PYTHON [python3] (scripts/lib/python_env.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
CONFIG="configs/web.yaml"
GENERATE=0
DATA_ROOT=""
GEN_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --generate) GENERATE=1 ;;
        --tasks|--seed|--distractors) GEN_ARGS+=("$1" "$2"); shift ;;
        --data-root) DATA_ROOT="$2"; shift ;;
        --config) CONFIG="$2"; shift ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
# shellcheck source=scripts/lib/python_env.sh
source scripts/lib/python_env.sh
env_python mind2web
export PYTHONPATH="$PY_PATH"
if [ -z "$DATA_ROOT" ]; then
    DATA_ROOT="${MIND2WEB_DATA:-$("$PY" -c 'import sys; from evolving_rl.config import load_config
print(load_config(sys.argv[1]).mind2web.data_root)' "$CONFIG")}"
fi
if [ "$GENERATE" = 1 ]; then
    export MIND2WEB_ZIP_PASSWORD="${MIND2WEB_ZIP_PASSWORD:-$("$PY" -c \
        'from env.mind2web.generate import DEFAULT_PASSWORD; print(DEFAULT_PASSWORD)')}"
    "$PY" -m env.mind2web.generate --out "$DATA_ROOT" "${GEN_ARGS[@]}"
fi
exec "$PY" -m env.mind2web.prepare --config "$CONFIG" --data-root "$DATA_ROOT"
