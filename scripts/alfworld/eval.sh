#!/usr/bin/env bash
# Evaluate a checkpoint on ALFWorld (valid_seen + valid_unseen; training vs held-out task types).
#
#   bash scripts/alfworld/eval.sh --hf models/<checkpoint>            [--protocols reference no_skill]
#   bash scripts/alfworld/eval.sh --local runs/<run>/checkpoints/step_0003 --config configs/<local profile>.yaml
#   bash scripts/alfworld/eval.sh --torch-dist runs/alfworld/checkpoints/iter_0000149 --hf-base models/Qwen2.5-7B-Instruct
#
# Default config: configs/alfworld.yaml. Options and environment: scripts/lib/eval_launch.sh (--help). The
# data must be prepared first (scripts/alfworld/prepare_data.sh); the evaluation says so otherwise.
# Results: <out>/report.md, report.json, one chart per split, cases.jsonl (rerun to resume: cases are
# kept under a digest of the checkpoint's files, settings and data; others are set aside).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/eval_launch.sh
source scripts/lib/eval_launch.sh
eval_main "${CONFIG:-configs/alfworld.yaml}" "$@"
