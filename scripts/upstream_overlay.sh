#!/usr/bin/env bash
# Install the overlay the upstream tests (tests/slime_upstream) run slime's SGLang-facing code in:
# SGLang at the pin's version and the packages its import needs, into $VENV/upstream-overlay with
# `pip --target --no-deps`, so nothing in the project's venv changes. The tests put it first on
# PYTHONPATH of the child processes that import SGLang; the project's own tests never see it.
# (slime's other CPU requirements, ray, sglang-router, wandb, pylatexenc, six, are in the dev
# extra.) SGLang 0.5.15.post1 pins transformers 5.12.1 and tokenizers < 0.23.1, older than the
# project's; no torchvision build matches the CPU torch (tests/slime_upstream/stand_ins says how
# that is handled). kernels at SGLang's pin (< 0.15): transformers 5.12.1 builds its hub-kernel
# table at import from whatever kernels it finds, and the project's newer transformers brings
# kernels 0.19, whose LayerRepository refuses that table. Idempotent: a stamp records the pins.
# Usage: scripts/upstream_overlay.sh   (VENV [.venv] as scripts/setup_env.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
OVERLAY="$VENV/upstream-overlay"
# shellcheck source=scripts/lib/pins.sh
source "$ROOT/scripts/lib/pins.sh"
PINS=(
    "sglang==$SGLANG_VERSION" transformers==5.12.1 tokenizers==0.22.2 huggingface-hub==1.33.0
    triton==3.7.0 openai==2.6.1 pybase64==1.5.1 pyzmq==27.3.0 msgspec==0.23.0 dill==0.4.1
    partial-json-parser==0.2.1.1.post7 sentencepiece==0.2.3
    ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 traitlets==5.16.1
    decorator==5.3.1 pexpect==4.9.0 ptyprocess==0.7.0 stack-data==0.6.3 asttokens==3.0.2
    executing==2.3.0 pure-eval==0.2.4 matplotlib-inline==0.2.2
    kernels==0.14.1 kernels-data==0.14.1
)
stamp="$OVERLAY/.pins"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${PINS[*]}" ]; then
    exit 0
fi
rm -rf "$OVERLAY"
# uv when setup_env.sh put it into the venv (seconds from its cache), else pip.
if [[ "$("$VENV/bin/uv" --version 2>/dev/null)" == "uv $UV_VERSION "* ]]; then
    "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps --target "$OVERLAY" \
        "${PINS[@]}"
else
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps \
        --target "$OVERLAY" "${PINS[@]}"
fi
echo "${PINS[*]}" > "$stamp"
