#!/usr/bin/env bash
# Build or refresh the probe's retrieval embedding cache from its prepared splits.
# Usage: scripts/probe/build_cache.sh [--config configs/probe_stated_1gpu.yaml] [--set KEY=VALUE ...]
#   --config   default configs/probe_stated_1gpu.yaml (the hidden probe: probe_hidden_1gpu.yaml)
#   --set      config override, e.g. --set retrieval.device=cpu
# The splits come from `python -m env.probe.service --config CONFIG` (generated from probe.seed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
bash scripts/setup_env.sh retrieval,dev >/dev/null
exec "${VENV:-$ROOT/.venv}/bin/python" -m evolving_rl.retrieval.build \
    --config configs/probe_stated_1gpu.yaml "$@"
