#!/usr/bin/env bash
# Prepare ALFWorld prompt datasets; optionally generate the games first.
# Usage: scripts/alfworld/prepare_data.sh [--generate [--per-type N] [--seed S] [--workers W]]
#                                         [--config configs/alfworld.yaml]
#   --generate   write proven games into the config's alfworld.data_root (else the data comes
#                from $ALFWORLD_DATA or alfworld.data_root, e.g. after `alfworld-download`)
#   --per-type   games per task type per split: N, or train=N,valid_seen=M,valid_unseen=K
# EVOLVING_RL_SETUP=skip installs nothing and runs $PYTHON [python3] (scripts/lib/python_env.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
CONFIG="configs/alfworld.yaml"
GENERATE=0
GEN_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --generate) GENERATE=1 ;;
        --per-type|--seed|--workers) GEN_ARGS+=("$1" "$2"); shift ;;
        --config) CONFIG="$2"; shift ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
# shellcheck source=scripts/lib/python_env.sh
source scripts/lib/python_env.sh
env_python alfworld
export PYTHONPATH="$PY_PATH"
if [ "$GENERATE" = 1 ]; then
    DATA_ROOT="$("$PY" -c 'import sys; from evolving_rl.config import load_config
print(load_config(sys.argv[1]).alfworld.data_root)' "$CONFIG")"
    "$PY" -m env.alfworld.generate --config "$CONFIG" "${GEN_ARGS[@]}"
    exec "$PY" -m env.alfworld.prepare --config "$CONFIG" --data-root "$DATA_ROOT"
fi
exec "$PY" -m env.alfworld.prepare --config "$CONFIG"
