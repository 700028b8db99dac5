#!/usr/bin/env bash
# Train the solver + extractor policy on Mind2Web with slime (reference run: docs/fidelity.md):
# Qwen2.5-7B-Instruct, 8 GPUs, TP 2, training and rollout colocated, 16 source tasks per rollout,
# N 8 skills each played on K 4 retrieved training tasks, one optimiser step per rollout, the
# optimiser and PPO clip of the ALFWorld run, λ_e 0.1 and no entropy term (configs/web.yaml).
# Schedule as the reference's scripts/web/train_web.sh: 200 rollouts, a checkpoint every 50, an
# evaluation every 25 on test_task, test_website and test_domain; rollouts at the config's top-p
# (0.85), each solver step up to 4096 new tokens and each skill up to 1536 (the config's
# sampling), greedy slime evaluation up to 4096.
#
# The launch itself (prerequisite checks, our Mind2Web env server and the retrieval server, a Ray
# head, slime's train.py with our hooks, stopping exactly what it started, the slime flags that
# matter) is scripts/lib/slime_launch.sh, shared with scripts/alfworld/train_alfworld.sh; its
# header lists the overrides common to both. Retrieval: one server over the cache of every split;
# training retrieves among the train split only (the config's pipeline.retrieval_split).
#
# Prerequisites: the slime Docker image (slimerl/slime) or an equivalent environment with this
# project installed; `git submodule update --init slime`; the Mind2Web data and its prepared
# splits (scripts/web/prepare_data.sh; the official test zip needs MIND2WEB_ZIP_PASSWORD); the
# retrieval cache from scripts/web/build_cache.sh; the HF model in $MODEL_DIR and its torch_dist
# conversion in $REF_DIR (scripts/models/convert_hf_to_torch_dist.sh).
#
# Environment overrides of this run (defaults in brackets):
#   CONFIG [configs/web.yaml]  RUN_DIR [<repo>/runs/mind2web]
#   PREPARED_DIR [<repo>/data/mind2web/prepared]  TRAIN_SPLIT [train]
#   EVAL_SPLITS ["test_task test_website test_domain"]  EVAL_INTERVAL [25]  NUM_ROLLOUT [200]
#   SAVE_INTERVAL [50]
# Extra arguments are appended to slime's train.py command line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CONFIG="$(realpath -m "${CONFIG:-$ROOT/configs/web.yaml}")"
ENV_LAUNCH=env.mind2web.launch
RUN_NAME=mind2web
RUN_DIR="${RUN_DIR:-$ROOT/runs/mind2web}"
PREPARED_DIR="${PREPARED_DIR:-$ROOT/data/mind2web/prepared}"
TRAIN_SPLIT="${TRAIN_SPLIT:-train}"
EVAL_SPLITS="${EVAL_SPLITS:-test_task test_website test_domain}"
EVAL_INTERVAL="${EVAL_INTERVAL:-25}"
NUM_ROLLOUT="${NUM_ROLLOUT:-200}"
SAVE_INTERVAL="${SAVE_INTERVAL:-50}"

# shellcheck source=scripts/lib/slime_launch.sh
source "$ROOT/scripts/lib/slime_launch.sh"
