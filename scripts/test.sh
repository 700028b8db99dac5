#!/usr/bin/env bash
# The test command of the README: set up (or reuse) the virtualenv, then run the CPU suite (what
# CI runs) on every core (pytest-xdist: a worker a core and one more, an idle one taking tests
# queued for a busy one; TEST_WORKERS=N, or `-n N` among the arguments, sets how many, `-n 0`
# none). Extra arguments go to pytest (e.g. `-m slow` for the long tests, `-p randomly` for a
# random order: its seed is printed, `--randomly-seed=S` replays one). First argument `quick`: the
# quick tier for the edit-test loop, without the end-to-end modules (tests/conftest.py END_TO_END:
# real servers, game generation, benchmarks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
# Where slime's sources are found (tests/upstream.py), the overlay its SGLang-facing code needs.
if [ -f slime/slime/utils/types.py ] || [ -n "${EVOLVING_RL_SLIME_PATH:-}" ]; then
    bash scripts/upstream_overlay.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Bytecode, kept in one folder of the venv (PYTHONPYCACHEPREFIX) rather than beside the sources:
# uv installs none, slime's and Megatron's sources may be read-only (../shared/upstream), and
# with PYTHONDONTWRITEBYTECODE set (as on our CI machines) every process the suite starts (servers,
# benchmarks, the child pytests that import SGLang) compiled what it imports again: SGLang +
# Megatron + slime 16.5 s a process, 7.6 s from bytecode; torch + transformers 3.5 s, 1.8 s. So
# bytecode is written, but only there: nothing appears beside a source.
VENV="${VENV:-$ROOT/.venv}"
PYCACHE="$VENV/pycache"
mkdir -p "$PYCACHE" 2>/dev/null && [ -w "$PYCACHE" ] \
    || PYCACHE="${XDG_CACHE_HOME:-$HOME/.cache}/evolving_rl/pycache"
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PYCACHE}"
unset PYTHONDONTWRITEBYTECODE
if [ "${1:-}" = quick ]; then
    shift
    set -- -m "not slow and not gpu and not end_to_end" "$@"
fi
# A worker for each core this process may run on (`nproc`: affinity and cpusets), and one more:
# many tests wait on a server or a subprocess, or hold connections for a fixed time, so with a
# worker a core the cores idled 20% of a run (2 cores: 536 s with 2 workers, 470 s with 3, 85% of
# both cores busy). Not xdist's `auto`: with psutil installed it counts the host's physical
# cores, 1 on a 2-vCPU VM whose vCPUs are one core's two threads, and a container's host's all.
exec "$VENV/bin/python" -m pytest -n "${TEST_WORKERS:-$(( $(nproc) + 1 ))}" --dist worksteal \
    "$@"
