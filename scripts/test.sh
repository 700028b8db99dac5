#!/usr/bin/env bash
# The test command of the README: set up (or reuse) the virtualenv, then run the CPU suite (what
# CI runs) on every core (pytest-xdist: a worker a core, an idle one taking tests queued for a
# busy one; TEST_WORKERS=N, or `-n N` among the arguments, sets how many, `-n 0` none). Extra
# arguments go to pytest (e.g. `-m slow` for the long tests, `-p randomly` for a random order: its
# seed is printed, `--randomly-seed=S` replays one). First argument `quick`: the quick tier for
# the edit-test loop, without the end-to-end modules (tests/conftest.py END_TO_END: real servers,
# game generation, benchmarks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
# Where slime's sources are found (tests/upstream.py), the overlay its SGLang-facing code needs.
if [ -f slime/slime/utils/types.py ] || [ -n "${EVOLVING_RL_SLIME_PATH:-}" ]; then
    bash scripts/upstream_overlay.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "${1:-}" = quick ]; then
    shift
    set -- -m "not slow and not gpu and not end_to_end" "$@"
fi
# A worker for each core this process may run on (`nproc`: affinity and cpusets). Not xdist's
# `auto`: with psutil installed it counts the host's physical cores, 1 on a 2-vCPU VM whose vCPUs
# are one core's two threads, and a container's host's all.
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest -n "${TEST_WORKERS:-$(nproc)}" --dist worksteal \
    "$@"
