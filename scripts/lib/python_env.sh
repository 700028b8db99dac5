# shellcheck shell=bash
# The interpreter of a launcher, by one rule (scripts/run_local.sh's and every launcher a recipe
# step of scripts/slime_1gpu.sh calls). Sourced after ROOT is set:
#   source "$ROOT/scripts/lib/python_env.sh"; env_python [EXTRAS]
# sets PY (the interpreter) and PY_PATH (this checkout's folders for PYTHONPATH).
#   EVOLVING_RL_SETUP=skip  installs nothing: PY is $PYTHON (default python3), PY_PATH this
#                           checkout's src/ then its root (a node whose interpreter already holds
#                           the env stack, e.g. from a wheelhouse, with no network)
#   otherwise               scripts/setup_env.sh EXTRAS (its default extras when none) creates or
#                           reuses the venv ($VENV, default .venv): PY is its python, PY_PATH the
#                           root (the project is installed there)

# shellcheck disable=SC2034  # PY and PY_PATH are for the sourcing launcher
env_python() {  # [EXTRAS]
    if [ "${EVOLVING_RL_SETUP:-}" = skip ]; then
        PY="${PYTHON:-python3}"
        PY_PATH="$ROOT/src:$ROOT"
    else
        bash "$ROOT/scripts/setup_env.sh" ${1:+"$1"} >&2
        PY="${VENV:-$ROOT/.venv}/bin/python"
        PY_PATH="$ROOT"
    fi
}
