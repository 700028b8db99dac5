#!/usr/bin/env bash
# The test command of the README: set up (or reuse) the virtualenv, then run the fast CPU suite.
# Extra arguments go to pytest (e.g. `-m slow` for the long tests).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
# Where slime's sources are found (tests/upstream.py), the overlay its SGLang-facing code needs.
if [ -f slime/slime/utils/types.py ] || [ -n "${EVOLVING_RL_SLIME_PATH:-}" ]; then
    bash scripts/upstream_overlay.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest "$@"
