#!/usr/bin/env bash
# The main job on the embedded CPU default (configs/local_cpu.yaml).
# Sets up (or reuses) the virtualenv, then runs the local pipeline entry point.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CONFIG="${CONFIG:-configs/local_cpu.yaml}"
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$ROOT"
exec "${VENV:-$ROOT/.venv}/bin/python" -m evolving_rl.local --config "$CONFIG" "$@"
