# shellcheck shell=bash
# The slime launch shared by scripts/alfworld/train_alfworld.sh and scripts/web/train_web.sh,
# sourced as their last line (it runs the job; the script's arguments go to slime's train.py).
#
# The caller sets, before sourcing: ROOT (the repo), CONFIG (our YAML config), ENV_LAUNCH (the env
# server's launcher module: `python -m $ENV_LAUNCH start|stop --config`), RUN_NAME (job ids,
# messages), RUN_DIR, PREPARED_DIR, TRAIN_SPLIT, EVAL_SPLITS, EVAL_INTERVAL, NUM_ROLLOUT,
# SAVE_INTERVAL. Defaults of the rest (overridable from the environment):
#   SLIME_DIR [<repo>/slime]  MEGATRON_DIR [/root/Megatron-LM]
#   MODEL_DIR [<repo>/models/Qwen2.5-7B-Instruct]  REF_DIR [$MODEL_DIR_torch_dist]
#   MODEL_ARGS_NAME [qwen2.5-7B] (slime's scripts/models/<name>.sh)  SAVE_DIR [$RUN_DIR/checkpoints]
#   NUM_GPUS [8]  TP_SIZE [2]  ROLLOUT_GPUS_PER_ENGINE [$TP_SIZE]
#   MAX_TOKENS_PER_GPU [20480]  SGLANG_MEM_FRACTION [0.7]  RAY_PORT [6379]
#   RAY_DASHBOARD_PORT [8265]  RAY_READY_TIMEOUT_S [60] (the wait for Ray's job API)
#   TENSORBOARD_DIR [$RUN_DIR/tensorboard] (slime's --use-tensorboard)  PYTHON [python3]
#   CONFIG_SET [] "key=value ..." overrides of the config for this run (pipeline.method=...)
#   SLIME_LAUNCH_DRY_RUN [] a folder: start nothing, write slime's argument list there
# One GPU: configs/alfworld_1gpu.yaml's header has the profile (what ran: docs/results/
# 2026-12-03-slime-one-gpu.md).
# One source for slime's flags: everything the config or our hooks decide (the hook paths, loss
# type, batch size = pipeline.source_tasks_per_rollout, rollout temperature and top-p, clip range,
# lr, Adam betas, weight decay, grad clip, the --entropy-coef switch, --use-kl-loss) comes from
# `python -m evolving_rl.slime_bridge.args --config CONFIG` (src/evolving_rl/slime_bridge/
# settings.py: config_flags, where each flag's reason is). This script keeps only paths,
# processes and the caller's extra flags; an extra flag that contradicts the config (e.g. --lr
# 1e-5 while loss.lr is 1e-6) is refused before anything starts. --kl-loss-coef is not given:
# slime reads it only in its own loss, our loss takes the per-role loss.kl_coef.
# Checkpoints: every SAVE_INTERVAL rollouts, except that a launch with --check-weight-update-equal
# saves nothing unless its extra flags give --save-interval (one such launch wrote 8.2 GiB).
#   --eval-temperature 0 ...      slime's own eval defaults, greedy as the reference's; our eval
#                                 protocol samples with the config's sampling.eval_* settings
# No --rollout-max-response-len: the pipeline sends each role's max_new_tokens from our config;
# slime reads that flag only in its own generate function, eval defaults and optional metrics.
#
# The environment: the image slime at our pin is released as, slimerl/slime:nightly-dev-20260810a-cu129
# (SGLang v0.5.15.post1 with slime's patches, Megatron-LM 1dcf0daf, slime's sglang-router fork).
#
# GPU memory: colocated, slime offloads Megatron during rollouts and SGLang during training
# (slime/utils/arguments.py:1936-1950), while the retrieval server, when retrieval.device is a GPU,
# stays resident through both: Qwen3-Embedding-4B in bfloat16 (retrieval.dtype auto) is ~7.5 GiB
# of weights plus the activations of retrieval.batch_size texts (float32: twice that). On cuda
# (GPU 0) it comes out of the 30% SGLang leaves at SGLANG_MEM_FRACTION 0.7 during rollouts and out
# of Megatron's room during training; retrieval.device (cpu, cuda:N) moves it.
#
# Before starting anything it checks the prerequisites and names the first one missing: slime's
# train.py and model-args script, the HF model and its torch_dist conversion, the prepared train
# and eval splits, the retrieval cache (retrieval.cache_path), the `ray` command; then the stack
# (src/evolving_rl/slime_bridge/stack.py: top-p replay needs slime's forked sglang-router; other
# SGLang / Megatron-LM versions than the pin's are a loud warning). Then it starts,
# in order: the env server (our launcher, PID file), the retrieval server (its launcher, PID
# file), a Ray head, then `ray job submit` of slime's train.py with our hooks; waits for the job.
# The run reads its own copy of the config, $RUN_DIR/config.yaml. On exit or Ctrl-C it stops
# exactly what it started: the Ray job it submitted, the Ray head it started (`ray start --head`
# fails when one already runs, so never someone else's), and the servers via their launchers'
# PID files. Nothing is killed by name. The servers run from the
# repo root, so relative paths in the config are relative to it.

slime_usage() {  # the calling script's header, then this file's (after the shellcheck line)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    echo
    awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' "${BASH_SOURCE[0]}"
}
case "${1:-}" in -h|--help) slime_usage; exit 0 ;; esac

SLIME_DIR="$(realpath -m "${SLIME_DIR:-$ROOT/slime}")"
MEGATRON_DIR="${MEGATRON_DIR:-/root/Megatron-LM}"
MODEL_DIR="$(realpath -m "${MODEL_DIR:-$ROOT/models/Qwen2.5-7B-Instruct}")"
REF_DIR="$(realpath -m "${REF_DIR:-${MODEL_DIR}_torch_dist}")"
MODEL_ARGS_NAME="${MODEL_ARGS_NAME:-qwen2.5-7B}"
RUN_DIR="$(realpath -m "$RUN_DIR")"
SAVE_DIR="$(realpath -m "${SAVE_DIR:-$RUN_DIR/checkpoints}")"
PREPARED_DIR="$(realpath -m "$PREPARED_DIR")"
NUM_GPUS="${NUM_GPUS:-8}"
TP_SIZE="${TP_SIZE:-2}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-$TP_SIZE}"
MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-20480}"
SGLANG_MEM_FRACTION="${SGLANG_MEM_FRACTION:-0.7}"
RAY_PORT="${RAY_PORT:-6379}"
RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
PYTHON="${PYTHON:-python3}"
HOOKS=evolving_rl.slime_hooks

die() { echo "$(basename "$0"): $*" >&2; exit 2; }
[ -z "${PROMPTS_PER_ROLLOUT:-}" ] || die "PROMPTS_PER_ROLLOUT is gone: the config's" \
    "pipeline.source_tasks_per_rollout is slime's --rollout-batch-size"
# SLIME_LAUNCH_DRY_RUN=DIR: check and build everything, start nothing: a missing prerequisite is
# a warning, the run's config copy and slime's custom config go to DIR, and slime's full train.py
# argument list is written to DIR/train_argv (NUL-separated) for slime's own parser
# (python -m evolving_rl.slime_bridge.validate; scripts/slime_1gpu.sh --dry-run runs both).
DRY_RUN_DIR="${SLIME_LAUNCH_DRY_RUN:+$(realpath -m "$SLIME_LAUNCH_DRY_RUN")}"
need() {  # need PATH [HOW]: a prerequisite; missing, the launch stops (a dry run warns)
    [ -e "$1" ] && return 0
    [ -n "$DRY_RUN_DIR" ] && { echo "$(basename "$0"): dry run: missing $1${2:+ ($2)}" >&2; return 0; }
    die "missing $1 (${2:-see the prerequisites at the top of this script})"
}
# slime checks that --ref-load exists even under --debug-rollout-only, which loads no Megatron
# model (slime/utils/arguments.py:1776-1777): a rollout-only run may name any existing folder.
need "$CONFIG"
need "$SLIME_DIR/train.py" "slime's source: git submodule update --init slime"
need "$SLIME_DIR/scripts/models/$MODEL_ARGS_NAME.sh" "slime's model-args script"
for path in "$MODEL_DIR" "$REF_DIR" "$PREPARED_DIR/$TRAIN_SPLIT.jsonl"; do need "$path"; done
EVAL_DATA=()
for split in $EVAL_SPLITS; do
    need "$PREPARED_DIR/$split.jsonl"
    EVAL_DATA+=("$split" "$PREPARED_DIR/$split.jsonl")
done
cd "$ROOT" || exit 2
export PYTHONPATH="$ROOT:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# --- what the config decides (one token a line; exit 2 names a contradicting extra flag) -----
# CONFIG_SET="key=value ...": overrides of the config for this run (e.g. pipeline.method=grpo_baseline),
# applied to the run's copy and to the flags alike.
CONFIG_OVERRIDES=()
for override in ${CONFIG_SET:-}; do CONFIG_OVERRIDES+=(--set "$override"); done
CONFIG_FLAGS_TEXT="$("$PYTHON" -m evolving_rl.slime_bridge.args --config "$CONFIG" \
    "${CONFIG_OVERRIDES[@]}" --save-dir "$SAVE_DIR" --save-interval "$SAVE_INTERVAL" -- "$@")" || exit 2
mapfile -t CONFIG_FLAGS <<< "$CONFIG_FLAGS_TEXT"
RETRIEVAL_CACHE="$("$PYTHON" -c 'import sys; from evolving_rl.config import load_config
print(load_config(sys.argv[1]).retrieval.cache_path)' "$CONFIG")"
need "$RETRIEVAL_CACHE" "retrieval.cache_path; scripts/*/build_cache.sh --config $CONFIG builds it"
if [ -z "$DRY_RUN_DIR" ]; then
    command -v ray >/dev/null || die "missing the ray command (the slime image has it)"
    # The stack slime at the pin was built with (src/evolving_rl/slime_bridge/stack.py): top-p
    # replay needs slime's fork of sglang-router; other SGLang / Megatron-LM versions: a warning.
    "$PYTHON" -m evolving_rl.slime_bridge.stack --config "$CONFIG" --megatron-dir "$MEGATRON_DIR" \
        || die "this environment cannot run the config's top-p replay (see above)"
fi
STATE_DIR="${DRY_RUN_DIR:-$RUN_DIR}"
mkdir -p "$STATE_DIR"
# The run reads its own copy of the config (the job through --custom-config-path, the servers'
# start and stop): editing or removing the original mid-run changes nothing, and the run records
# what it ran with. A removed original once left the servers running: their stop could not read
# it. Relative paths in the config stay relative to the repo root, where the servers run. The
# copy is the validated config with run.output_dir set to RUN_DIR, where the pipeline writes its
# skill library: two runs of one config with other RUN_DIRs once appended to one library.
# shellcheck disable=SC2086  # CONFIG_SET: key=value words, split on purpose (as above)
"$PYTHON" -c 'import json, sys, yaml
from evolving_rl.config import load_config, to_dict
cfg = load_config(sys.argv[1], [*sys.argv[4:], "run.output_dir=" + json.dumps(sys.argv[2])])
text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
open(sys.argv[3], "w", encoding="utf-8").write(text)' "$CONFIG" "$RUN_DIR" "$STATE_DIR/config.yaml" \
    ${CONFIG_SET:-}
CONFIG="$STATE_DIR/config.yaml"

# --- slime arguments ------------------------------------------------------------------------
# Our options travel in one YAML key (slime ignores unknown flags; the hooks validate it).
CUSTOM_CONFIG="$STATE_DIR/slime_custom_config.yaml"
"$PYTHON" -c 'import json, sys; print(json.dumps({"evolving_rl_config": sys.argv[1]}))' \
    "$CONFIG" > "$CUSTOM_CONFIG"
MODEL_ARGS=()
# shellcheck source=/dev/null
[ -e "$SLIME_DIR/scripts/models/$MODEL_ARGS_NAME.sh" ] &&
    source "$SLIME_DIR/scripts/models/$MODEL_ARGS_NAME.sh"  # defines MODEL_ARGS
CLUSTER_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node "$NUM_GPUS" --colocate)
CKPT_ARGS=(--hf-checkpoint "$MODEL_DIR" --ref-load "$REF_DIR" --load "$SAVE_DIR")
HOOK_ARGS=(--custom-reward-post-process-path "$HOOKS.post_process_rewards"
           --custom-config-path "$CUSTOM_CONFIG")
# One source task per data-source sample; the pipeline expands it into its N x K x R samples.
ROLLOUT_ARGS=(--prompt-data "$PREPARED_DIR/$TRAIN_SPLIT.jsonl" --input-key prompt --label-key id
              --metadata-key metadata --rollout-shuffle --num-rollout "$NUM_ROLLOUT")
EVAL_ARGS=(--eval-interval "$EVAL_INTERVAL" --eval-prompt-data "${EVAL_DATA[@]}"
           --eval-temperature 0 --eval-top-p 1.0 --eval-max-response-len 4096)
# The reference's optimiser and schedule; its values (lr, betas, ...) are the config's.
OPTIMIZER_ARGS=(--optimizer adam --lr-decay-style constant)
PERF_ARGS=(--tensor-model-parallel-size "$TP_SIZE" --sequence-parallel
           --pipeline-model-parallel-size 1 --context-parallel-size 1
           --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
           --max-tokens-per-gpu "$MAX_TOKENS_PER_GPU")
SGLANG_ARGS=(--rollout-num-gpus-per-engine "$ROLLOUT_GPUS_PER_ENGINE"
             --sglang-mem-fraction-static "$SGLANG_MEM_FRACTION")
MISC_ARGS=(--attention-dropout 0.0 --hidden-dropout 0.0 --accumulate-allreduce-grads-in-fp32
           --attention-softmax-in-fp32 --attention-backend flash)

# The job's PYTHONPATH: Megatron-LM, slime, this repo and the caller's PYTHONPATH (e.g. a `pip
# --target` overlay of the slime wheelhouse). TENSORBOARD_DIR: where slime's --use-tensorboard
# writes (slime/observability/tensorboard_utils.py:44); unset, it is a path relative to the Ray
# job's working directory, which a one-GPU run on 2026-12-03 never found again.
RUNTIME_ENV_JSON="$("$PYTHON" -c 'import json, sys
print(json.dumps({"env_vars": {"PYTHONPATH": sys.argv[1], "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                               "PYTHONUNBUFFERED": "1", "TENSORBOARD_DIR": sys.argv[2]}}))' \
    "$MEGATRON_DIR:$SLIME_DIR:$PYTHONPATH" "${TENSORBOARD_DIR:-$RUN_DIR/tensorboard}")"

TRAIN_ARGV=(python3 "$SLIME_DIR/train.py"
    "${CLUSTER_ARGS[@]}" "${MODEL_ARGS[@]}" "${CKPT_ARGS[@]}" "${HOOK_ARGS[@]}"
    "${CONFIG_FLAGS[@]}" "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${OPTIMIZER_ARGS[@]}"
    "${PERF_ARGS[@]}" "${SGLANG_ARGS[@]}" "${MISC_ARGS[@]}" "$@")
if [ -n "$DRY_RUN_DIR" ]; then
    printf '%s\0' "${TRAIN_ARGV[@]:2}" > "$DRY_RUN_DIR/train_argv"
    printf '%s\n' "$RUNTIME_ENV_JSON" > "$DRY_RUN_DIR/runtime_env.json"
    echo "$(basename "$0"): dry run: slime's arguments in $DRY_RUN_DIR/train_argv; nothing started"
    exit 0
fi

# --- cleanup: only what this script started, newest first -----------------------------------
ENV_STARTED=0 RETRIEVAL_STARTED=0 RAY_STARTED=0 JOB_ID="" SUBMIT_PID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$JOB_ID" ]; then
        ray job stop --address "http://127.0.0.1:$RAY_DASHBOARD_PORT" "$JOB_ID" >/dev/null 2>&1 || true
    fi
    if [ -n "$SUBMIT_PID" ] && kill -0 "$SUBMIT_PID" 2>/dev/null; then
        kill "$SUBMIT_PID" 2>/dev/null || true
    fi
    [ "$RAY_STARTED" = 1 ] && { ray stop || echo "ray stop failed" >&2; }
    [ "$RETRIEVAL_STARTED" = 1 ] && { "$PYTHON" -m env.retrieval.launcher stop --config "$CONFIG" \
        || echo "retrieval server stop failed" >&2; }
    [ "$ENV_STARTED" = 1 ] && { "$PYTHON" -m "$ENV_LAUNCH" stop --config "$CONFIG" \
        || echo "env server stop failed ($ENV_LAUNCH)" >&2; }
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- servers and Ray ------------------------------------------------------------------------
"$PYTHON" -m "$ENV_LAUNCH" start --config "$CONFIG"
ENV_STARTED=1
"$PYTHON" -m env.retrieval.launcher start --config "$CONFIG"
RETRIEVAL_STARTED=1
ray start --head --port "$RAY_PORT" --num-gpus "$NUM_GPUS" --disable-usage-stats \
    --dashboard-host 127.0.0.1 --dashboard-port "$RAY_DASHBOARD_PORT"
RAY_STARTED=1
# `ray job submit` needs the dashboard's job API, which `ray start` does not wait for and which a
# minimal ray (no `ray[default]` extra) never serves ("http server disabled" in its dashboard.log):
# probe it with the same client for up to RAY_READY_TIMEOUT_S, then say so instead of a traceback.
ready=0
for _ in $(seq "${RAY_READY_TIMEOUT_S:-60}"); do
    ray job list --address "http://127.0.0.1:$RAY_DASHBOARD_PORT" >/dev/null 2>&1 && { ready=1; break; }
    sleep 1
done
[ "$ready" = 1 ] || die "Ray's job API at 127.0.0.1:$RAY_DASHBOARD_PORT never answered: is ray" \
    "installed with its default extra (pip install 'ray[default]')?"

# --- the job --------------------------------------------------------------------------------
JOB_ID="evolving_rl_${RUN_NAME}_$(date +%Y%m%d_%H%M%S)_$$"
ray job submit --address "http://127.0.0.1:$RAY_DASHBOARD_PORT" --submission-id "$JOB_ID" \
    --runtime-env-json "$RUNTIME_ENV_JSON" -- "${TRAIN_ARGV[@]}" &
SUBMIT_PID=$!
wait "$SUBMIT_PID"  # `wait` returns at once on Ctrl-C, so the trap runs promptly
