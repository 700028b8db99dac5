#!/usr/bin/env bash
# Build or refresh the probe's retrieval embedding cache from its prepared splits.
# Usage: scripts/probe/build_cache.sh [--config configs/probe_stated_1gpu.yaml] [--set KEY=VALUE ...]
#   --config   default configs/probe_stated_1gpu.yaml (the hidden probe: probe_hidden_1gpu.yaml)
#   --set      config override, e.g. --set retrieval.device=cpu
# The splits come from `python -m env.probe.service --config CONFIG` (generated from probe.seed).
# EVOLVING_RL_SETUP=skip installs nothing and runs $PYTHON [python3] (scripts/lib/python_env.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
# shellcheck source=scripts/lib/python_env.sh
source scripts/lib/python_env.sh
env_python retrieval
PYTHONPATH="$PY_PATH" exec "$PY" -m evolving_rl.retrieval.build \
    --config configs/probe_stated_1gpu.yaml "$@"
