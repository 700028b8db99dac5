#!/usr/bin/env bash
# The main job of the embedded default (CONFIG, default configs/local_cpu.yaml), or with first
# argument `compare`, methods x seeds of that profile side by side and their aggregate.
#   bash scripts/run_local.sh [--set KEY=VALUE ...]
#   CONFIG=configs/local_gpu.yaml bash scripts/run_local.sh compare [--seeds 0,1,2]
#       [--methods evolving,grpo_baseline] [--parallel 6] [--out DIR] [--set KEY=VALUE ...]
# Sets up (or reuses) the virtualenv, then runs `python -m evolving_rl.local` (or
# `evolving_rl.local.experiments.compare`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
CONFIG="${CONFIG:-configs/local_cpu.yaml}"
MODULE=evolving_rl.local
if [ "${1:-}" = compare ]; then
    MODULE=evolving_rl.local.experiments.compare
    shift
fi
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$ROOT"
exec "${VENV:-$ROOT/.venv}/bin/python" -m "$MODULE" --config "$CONFIG" "$@"
