#!/usr/bin/env bash
# The main job of the embedded default (CONFIG, default configs/local_cpu.yaml), or with first
# argument `compare`, methods x seeds of that profile side by side and their aggregate.
#   bash scripts/run_local.sh [--set KEY=VALUE ...]
#   CONFIG=configs/local_gpu.yaml bash scripts/run_local.sh compare [--seeds 0,1,2]
#       [--methods evolving,grpo_baseline] [--parallel 6] [--out DIR] [--set KEY=VALUE ...]
# Sets up (or reuses) the virtualenv, then runs `python -m evolving_rl.local` (or
# `evolving_rl.local.experiments.compare`). EVOLVING_RL_SETUP=skip installs nothing and runs
# $PYTHON (default python3) with this checkout's src/ first on its path: for a node whose
# interpreter already holds the env stack (installed from a wheelhouse, no network).
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
# shellcheck source=scripts/lib/python_env.sh
source scripts/lib/python_env.sh
env_python ""  # setup_env.sh's default extras
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PY_PATH"
exec "$PY" -m "$MODULE" --config "$CONFIG" "$@"
