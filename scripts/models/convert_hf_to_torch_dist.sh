#!/usr/bin/env bash
# Convert a HuggingFace checkpoint to Megatron torch_dist (the --ref-load / first --load of a
# slime run) with slime's tools/convert_hf_to_torch_dist.py and the model's MODEL_ARGS from
# slime's scripts/models/<MODEL_ARGS_NAME>.sh. Run it in the slime Docker image.
#
# Usage: scripts/models/convert_hf_to_torch_dist.sh [extra converter args]
# Environment overrides (defaults in brackets):
#   MODEL_DIR [<repo>/models/Qwen2.5-7B-Instruct]  OUT_DIR [$MODEL_DIR_torch_dist]
#   MODEL_ARGS_NAME [qwen2.5-7B]  SLIME_DIR [<repo>/slime]  MEGATRON_DIR [/root/Megatron-LM]
#   NUM_GPUS [1] (more GPUs convert faster; the converter splits layers into pipeline stages)
#   PYTHON [python3]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
MODEL_DIR="${MODEL_DIR:-$ROOT/models/Qwen2.5-7B-Instruct}"
OUT_DIR="${OUT_DIR:-${MODEL_DIR}_torch_dist}"
MODEL_ARGS_NAME="${MODEL_ARGS_NAME:-qwen2.5-7B}"
SLIME_DIR="$(realpath "${SLIME_DIR:-$ROOT/slime}")"
MEGATRON_DIR="${MEGATRON_DIR:-/root/Megatron-LM}"
NUM_GPUS="${NUM_GPUS:-1}"
PYTHON="${PYTHON:-python3}"

CONVERTER="$SLIME_DIR/tools/convert_hf_to_torch_dist.py"
MODEL_SCRIPT="$SLIME_DIR/scripts/models/$MODEL_ARGS_NAME.sh"
for path in "$CONVERTER" "$MODEL_SCRIPT" "$MODEL_DIR/config.json"; do
    [ -e "$path" ] || { echo "convert_hf_to_torch_dist.sh: missing $path" >&2; exit 2; }
done
if [ -e "$OUT_DIR/latest_checkpointed_iteration.txt" ]; then
    echo "$OUT_DIR already holds a converted checkpoint; remove it to convert again" >&2
    exit 2
fi
# shellcheck source=/dev/null
source "$MODEL_SCRIPT"  # defines MODEL_ARGS

# this repo's src/ for the TE-free layer spec (--spec evolving_rl.slime_bridge.megatron_spec layer_spec)
export PYTHONPATH="$MEGATRON_DIR:$SLIME_DIR:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_DEVICE_MAX_CONNECTIONS=1
LAUNCH=("$PYTHON")
if [ "$NUM_GPUS" -gt 1 ]; then
    LAUNCH=(torchrun --standalone --nproc-per-node "$NUM_GPUS")
fi
"${LAUNCH[@]}" "$CONVERTER" "${MODEL_ARGS[@]}" --hf-checkpoint "$MODEL_DIR" --save "$OUT_DIR" "$@"
