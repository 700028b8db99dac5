#!/usr/bin/env bash
# Train on the probe environment with slime (issue 44, docs/design.md §7.5): tasks whose right
# answer is known, so that a GPU run first proves slime's plumbing in minutes on a task a correct
# loop must learn, before it spends hours on ALFWorld. Two one-GPU profiles of the recipe:
#   bash scripts/slime_1gpu.sh --profile probe_stated [--dry-run]   (plain GRPO must follow the
#                                                                    stated answer)
#   bash scripts/slime_1gpu.sh --profile probe_hidden [--dry-run]   (the method against GRPO on
#                                                                    families of hidden answers)
#
# The launch itself (prerequisite checks, our probe env server and the retrieval server, a Ray
# head, slime's train.py with our hooks, stopping exactly what it started) is
# scripts/lib/slime_launch.sh, shared with scripts/alfworld/train_alfworld.sh and
# scripts/web/train_web.sh; its header lists the overrides common to all three.
#
# Prerequisites: as scripts/alfworld/train_alfworld.sh, with the probe's prepared splits
# (python -m env.probe.service --config CONFIG) and its retrieval cache
# (scripts/probe/build_cache.sh --config CONFIG) in place of ALFWorld's.
#
# Environment overrides of this run (defaults in brackets):
#   CONFIG [configs/probe_stated_1gpu.yaml]  RUN_DIR [<repo>/runs/probe]
#   PREPARED_DIR [<repo>/data/probe_stated_1gpu/prepared]  TRAIN_SPLIT [train]
#   EVAL_SPLITS [valid]  EVAL_INTERVAL [10]  NUM_ROLLOUT [40]  SAVE_INTERVAL [0]
# Extra arguments are appended to slime's train.py command line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CONFIG="$(realpath -m "${CONFIG:-$ROOT/configs/probe_stated_1gpu.yaml}")"
ENV_LAUNCH=env.probe.launch
RUN_NAME=probe
RUN_DIR="${RUN_DIR:-$ROOT/runs/probe}"
PREPARED_DIR="${PREPARED_DIR:-$ROOT/data/probe_stated_1gpu/prepared}"
TRAIN_SPLIT="${TRAIN_SPLIT:-train}"
EVAL_SPLITS="${EVAL_SPLITS:-valid}"
EVAL_INTERVAL="${EVAL_INTERVAL:-10}"
NUM_ROLLOUT="${NUM_ROLLOUT:-40}"
SAVE_INTERVAL="${SAVE_INTERVAL:-0}"

# shellcheck source=scripts/lib/slime_launch.sh
source "$ROOT/scripts/lib/slime_launch.sh"
