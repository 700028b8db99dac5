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
#   NUM_GPUS [8]  TP_SIZE [2]  ROLLOUT_GPUS_PER_ENGINE [$TP_SIZE]  PROMPTS_PER_ROLLOUT [16]
#   MAX_TOKENS_PER_GPU [20480]  SGLANG_MEM_FRACTION [0.7]  RAY_PORT [6379]
#   RAY_DASHBOARD_PORT [8265]  RAY_READY_TIMEOUT_S [60] (the wait for Ray's job API)
#   TENSORBOARD_DIR [$RUN_DIR/tensorboard] (slime's --use-tensorboard)  PYTHON [python3]
# One GPU: configs/alfworld_1gpu.yaml's header has the profile (what ran: docs/results/
# 2026-12-03-slime-one-gpu.md).
# Read from the config, never given twice: --rollout-top-p (sampling.solver.top_p, which the
# hooks require equal to the extractor's) and the --entropy-coef switch (1 when a role has an
# entropy term, else slime's default 0).
#
# slime flags that matter beyond the obvious (the hooks' check_slime_args refuses them otherwise):
#   --num-steps-per-rollout 1     global batch = the rollout's source tasks: one optimiser step per
#                                 rollout in slime's LR schedule and step counter, as our convert
#                                 hook trains
#   --use-dynamic-batch-size      the sample count varies per rollout; static micro-batches fail
#                                 when it is not a multiple of their layout (e.g. 11 samples, DP 2)
#   --entropy-coef 1              a switch only: slime detaches the entropy when it is 0, which
#                                 would silently drop a per-role entropy term (ALFWorld's extractor
#                                 -0.03); with our custom loss slime uses the value for nothing else
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
PROMPTS_PER_ROLLOUT="${PROMPTS_PER_ROLLOUT:-16}"
MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-20480}"
SGLANG_MEM_FRACTION="${SGLANG_MEM_FRACTION:-0.7}"
RAY_PORT="${RAY_PORT:-6379}"
RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
PYTHON="${PYTHON:-python3}"
HOOKS=evolving_rl.slime_hooks

die() { echo "$(basename "$0"): $*" >&2; exit 2; }
# slime checks that --ref-load exists even under --debug-rollout-only, which loads no Megatron
# model (slime/utils/arguments.py:1776-1777): a rollout-only run may name any existing folder.
for path in "$CONFIG" "$SLIME_DIR/train.py" "$SLIME_DIR/scripts/models/$MODEL_ARGS_NAME.sh" \
            "$MODEL_DIR" "$REF_DIR" "$PREPARED_DIR/$TRAIN_SPLIT.jsonl"; do
    [ -e "$path" ] || die "missing $path (see the prerequisites at the top of this script)"
done
EVAL_DATA=()
for split in $EVAL_SPLITS; do
    [ -e "$PREPARED_DIR/$split.jsonl" ] || die "missing $PREPARED_DIR/$split.jsonl"
    EVAL_DATA+=("$split" "$PREPARED_DIR/$split.jsonl")
done
cd "$ROOT" || exit 2
export PYTHONPATH="$ROOT:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# --- what the config decides ----------------------------------------------------------------
# slime samples at one top-p and, below 1, replays each token's nucleus in the loss: the config's
# sampling.solver.top_p (= extractor's; the hooks check both).
ROLLOUT_TOP_P="$("$PYTHON" -c 'import sys; from evolving_rl.config import load_config
print(load_config(sys.argv[1]).sampling.solver.top_p)' "$CONFIG")"
# 1 when a role has an entropy term (the switch that keeps slime's entropy differentiable).
ENTROPY_SWITCH="$("$PYTHON" -c 'import sys; from evolving_rl.config import load_config
from evolving_rl.slime_bridge.settings import role_coefficients as coefficients
print(int(any(c.entropy != 0 for c in coefficients(load_config(sys.argv[1])).values())))' \
    "$CONFIG")"
RETRIEVAL_CACHE="$("$PYTHON" -c 'import sys; from evolving_rl.config import load_config
print(load_config(sys.argv[1]).retrieval.cache_path)' "$CONFIG")"
[ -e "$RETRIEVAL_CACHE" ] || die "missing the retrieval cache $RETRIEVAL_CACHE" \
    "(retrieval.cache_path; scripts/*/build_cache.sh --config $CONFIG builds it)"
command -v ray >/dev/null || die "missing the ray command (the slime image has it)"
# The stack slime at the pin was built with (src/evolving_rl/slime_bridge/stack.py): top-p replay
# needs slime's fork of sglang-router; other SGLang / Megatron-LM versions get a loud warning.
"$PYTHON" -m evolving_rl.slime_bridge.stack --config "$CONFIG" --megatron-dir "$MEGATRON_DIR" \
    || die "this environment cannot run the config's top-p replay (see above)"
mkdir -p "$RUN_DIR"
# The run reads its own copy of the config (the job through --custom-config-path, the servers'
# start and stop): editing or removing the original mid-run changes nothing, and the run records
# what it ran with. A removed original once left the servers running: their stop could not read
# it. Relative paths in the config stay relative to the repo root, where the servers run. The
# copy is the validated config with run.output_dir set to RUN_DIR, where the pipeline writes its
# skill library: two runs of one config with other RUN_DIRs once appended to one library.
"$PYTHON" -c 'import json, sys, yaml
from evolving_rl.config import load_config, to_dict
cfg = load_config(sys.argv[1], ["run.output_dir=" + json.dumps(sys.argv[2])])
text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
open(sys.argv[3], "w", encoding="utf-8").write(text)' "$CONFIG" "$RUN_DIR" "$RUN_DIR/config.yaml"
CONFIG="$RUN_DIR/config.yaml"

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

# --- slime arguments ------------------------------------------------------------------------
# Our options travel in one YAML key (slime ignores unknown flags; the hooks validate it).
CUSTOM_CONFIG="$RUN_DIR/slime_custom_config.yaml"
"$PYTHON" -c 'import json, sys; print(json.dumps({"evolving_rl_config": sys.argv[1]}))' \
    "$CONFIG" > "$CUSTOM_CONFIG"
# shellcheck source=/dev/null
source "$SLIME_DIR/scripts/models/$MODEL_ARGS_NAME.sh"  # defines MODEL_ARGS

CLUSTER_ARGS=(--actor-num-nodes 1 --actor-num-gpus-per-node "$NUM_GPUS" --colocate)
CKPT_ARGS=(--hf-checkpoint "$MODEL_DIR" --ref-load "$REF_DIR" --load "$SAVE_DIR"
           --save "$SAVE_DIR" --save-interval "$SAVE_INTERVAL")
HOOK_ARGS=(
    --rollout-function-path "$HOOKS.generate_rollout"
    --custom-convert-samples-to-train-data-path "$HOOKS.convert_samples_to_train_data"
    --custom-reward-post-process-path "$HOOKS.post_process_rewards"
    --custom-rollout-log-function-path "$HOOKS.log_rollout"
    --custom-eval-rollout-log-function-path "$HOOKS.log_eval_rollout"
    --loss-type custom_loss --custom-loss-function-path "$HOOKS.policy_loss"
    --custom-config-path "$CUSTOM_CONFIG"
)
# One source task per data-source sample; the pipeline expands it into its N x K x R samples.
ROLLOUT_ARGS=(--prompt-data "$PREPARED_DIR/$TRAIN_SPLIT.jsonl" --input-key prompt --label-key id
              --metadata-key metadata --rollout-shuffle --num-rollout "$NUM_ROLLOUT"
              --rollout-batch-size "$PROMPTS_PER_ROLLOUT" --n-samples-per-prompt 1
              --num-steps-per-rollout 1 --rollout-temperature 1.0 --rollout-top-p "$ROLLOUT_TOP_P")
EVAL_ARGS=(--eval-interval "$EVAL_INTERVAL" --eval-prompt-data "${EVAL_DATA[@]}"
           --eval-temperature 0 --eval-top-p 1.0 --eval-max-response-len 4096)
# The loss reads clip range and per-role KL/entropy from our config; the hooks refuse values here
# that disagree with it. --use-kl-loss makes slime compute reference log-probs; --entropy-coef
# only keeps slime's entropy differentiable (see the header).
LOSS_ARGS=(--advantage-estimator grpo --use-kl-loss --kl-loss-coef 0.01 --kl-loss-type low_var_kl
           --eps-clip 0.1 --eps-clip-high 0.15 --calculate-per-token-loss
           --entropy-coef "$ENTROPY_SWITCH")
OPTIMIZER_ARGS=(--optimizer adam --lr 1e-6 --lr-decay-style constant --weight-decay 0.1
                --adam-beta1 0.9 --adam-beta2 0.98 --clip-grad 1.0)
PERF_ARGS=(--tensor-model-parallel-size "$TP_SIZE" --sequence-parallel
           --pipeline-model-parallel-size 1 --context-parallel-size 1
           --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
           --use-dynamic-batch-size --max-tokens-per-gpu "$MAX_TOKENS_PER_GPU")
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

# --- the job --------------------------------------------------------------------------------
JOB_ID="evolving_rl_${RUN_NAME}_$(date +%Y%m%d_%H%M%S)_$$"
ray job submit --address "http://127.0.0.1:$RAY_DASHBOARD_PORT" --submission-id "$JOB_ID" \
    --runtime-env-json "$RUNTIME_ENV_JSON" -- \
    python3 "$SLIME_DIR/train.py" \
    "${CLUSTER_ARGS[@]}" "${MODEL_ARGS[@]}" "${CKPT_ARGS[@]}" "${HOOK_ARGS[@]}" \
    "${ROLLOUT_ARGS[@]}" "${EVAL_ARGS[@]}" "${LOSS_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" \
    "${PERF_ARGS[@]}" "${SGLANG_ARGS[@]}" "${MISC_ARGS[@]}" "$@" &
SUBMIT_PID=$!
wait "$SUBMIT_PID"  # `wait` returns at once on Ctrl-C, so the trap runs promptly
