#!/usr/bin/env bash
# Evaluate a checkpoint on Mind2Web (test_task, test_website, test_domain; standard metrics).
#
#   bash scripts/web/eval.sh --hf models/<checkpoint>            [--protocols reference no_skill]
#   bash scripts/web/eval.sh --local runs/<run>/checkpoints/step_0003 --config configs/<local profile>.yaml
#   bash scripts/web/eval.sh --torch-dist runs/mind2web/checkpoints/iter_0000199 --hf-base models/Qwen2.5-7B-Instruct
#
# Default config: configs/web.yaml. Options and environment: scripts/lib/eval_launch.sh (--help). The
# data must be prepared first (scripts/web/prepare_data.sh); the evaluation says so otherwise.
# Results: <out>/report.md, report.json, one chart per split, cases.jsonl (rerun to resume: cases are
# kept under a digest of the checkpoint's files, settings and data; others are set aside).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/eval_launch.sh
source scripts/lib/eval_launch.sh
eval_main "${CONFIG:-configs/web.yaml}" "$@"
