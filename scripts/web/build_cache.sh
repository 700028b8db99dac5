#!/usr/bin/env bash
# Build or refresh the Mind2Web retrieval embedding cache from the prepared splits.
# Usage: scripts/web/build_cache.sh [--config configs/web.yaml] [--splits NAME ...] [--set KEY=VALUE ...]
#   --config   default configs/web.yaml (the CPU default is configs/local_cpu.yaml)
#   --splits   split files to embed (default: every <prepared_dir>/<split>.jsonl)
#   --set      config override, e.g. --set retrieval.device=cpu --set retrieval.batch_size=16
# Unchanged texts are reused from an existing cache of the same model; see retrieval.cache_path.
# EVOLVING_RL_SETUP=skip installs nothing and runs $PYTHON [python3] (scripts/lib/python_env.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
# shellcheck source=scripts/lib/python_env.sh
source scripts/lib/python_env.sh
env_python retrieval
PYTHONPATH="$PY_PATH" exec "$PY" -m evolving_rl.retrieval.build --config configs/web.yaml "$@"
