#!/usr/bin/env bash
# Train the solver + extractor policy on ALFWorld with slime (reference run: docs/fidelity.md):
# Qwen2.5-7B-Instruct, 8 GPUs, TP 2, training and rollout colocated, 16 source tasks per rollout,
# one optimiser step per rollout, Adam lr 1e-6 constant, betas (0.9, 0.98), wd 0.1, PPO clip
# 0.1 / 0.15, low-variance KL to the reference (per-role coefficients from our config).
# Schedule as the reference's scripts/alfworld/train_alfworld.sh: 150 rollouts, a checkpoint and
# an evaluation every 25.
#
# The launch itself (prerequisite checks, the env and retrieval servers, a Ray head, slime's
# train.py with our hooks, stopping exactly what it started, the slime flags that matter) is
# scripts/lib/slime_launch.sh, shared with scripts/web/train_web.sh; its header lists the
# overrides common to both.
#
# Prerequisites: the slime Docker image (slimerl/slime) or an equivalent environment with this
# project installed; `git submodule update --init slime`; the prompt JSONL from
# scripts/alfworld/prepare_data.sh; the retrieval cache from scripts/alfworld/build_cache.sh; the
# HF model in $MODEL_DIR and its torch_dist conversion in $REF_DIR
# (scripts/models/convert_hf_to_torch_dist.sh).
#
# Environment overrides of this run (defaults in brackets):
#   CONFIG [configs/alfworld.yaml]  RUN_DIR [<repo>/runs/alfworld]
#   PREPARED_DIR [<repo>/data/alfworld/prepared]  TRAIN_SPLIT [train_seen]
#   EVAL_SPLITS ["valid_unseen valid_seen"]  EVAL_INTERVAL [25]  NUM_ROLLOUT [150]
#   SAVE_INTERVAL [25]
# Extra arguments are appended to slime's train.py command line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CONFIG="$(realpath -m "${CONFIG:-$ROOT/configs/alfworld.yaml}")"
ENV_LAUNCH=env.alfworld.launch
RUN_NAME=alfworld
RUN_DIR="${RUN_DIR:-$ROOT/runs/alfworld}"
PREPARED_DIR="${PREPARED_DIR:-$ROOT/data/alfworld/prepared}"
TRAIN_SPLIT="${TRAIN_SPLIT:-train_seen}"
EVAL_SPLITS="${EVAL_SPLITS:-valid_unseen valid_seen}"
EVAL_INTERVAL="${EVAL_INTERVAL:-25}"
NUM_ROLLOUT="${NUM_ROLLOUT:-150}"
SAVE_INTERVAL="${SAVE_INTERVAL:-25}"

# shellcheck source=scripts/lib/slime_launch.sh
source "$ROOT/scripts/lib/slime_launch.sh"
