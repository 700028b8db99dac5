#!/usr/bin/env bash
# Shared by scripts/alfworld/eval.sh and scripts/web/eval.sh: turn a checkpoint into a policy the
# evaluation can call, then run `python -m evolving_rl.evaluate` (which starts and stops the env
# and retrieval servers unless --no-servers is passed).
#
#   eval_main <default config> [checkpoint option] [evaluation options...]
#
# Checkpoint options (one):
#   --hf DIR            an HF folder, served by SGLang started here (127.0.0.1:$SGLANG_PORT,
#                       tensor parallel $SGLANG_TP), stopped on exit by its process group
#   --url URL           a running SGLang server or router (give --tokenizer DIR)
#   --openai-url URL    a running OpenAI-compatible endpoint (give --tokenizer DIR and
#                       --openai-model NAME; evaluation only: text answers are encoded again)
#   --torch-dist DIR    a slime torch_dist checkpoint (e.g. runs/alfworld/checkpoints/iter_0000149:
#                       slime saves at rollout ids 24, 49, ... and the last, 149); converted to HF
#                       once with slime's tools/convert_torch_dist_to_hf.py (--hf-base DIR: the
#                       original HF folder, for config and tokenizer), then served as --hf. A
#                       missing DIR fails with the iterations its parent folder holds
#   --local DIR         an HF folder run in-process by the local backend (--device cpu, cuda[:N],
#                       mps or xpu: one torch can use here, else exit 2 before anything starts;
#                       --dtype); a local main-job checkpoint is such a folder
# Everything else goes to the evaluation (--config, --out, --protocols, --splits, --repeats,
# --limit, --library, --no-servers, --fresh, ...: `python -m evolving_rl.evaluate --help`).
# Environment: PYTHON [<repo>/.venv/bin/python; python3 with EVOLVING_RL_SETUP=skip, which also
# puts this checkout's src/ first on its path: the evaluation installs nothing], SGLANG_PORT
# [30000], SGLANG_TP [1], SGLANG_PYTHON [python3] (the interpreter that has sglang),
# SGLANG_START_TIMEOUT [900], SLIME_DIR [<repo>/slime].
set -euo pipefail

header() {  # <file>: its header comment (after the shebang, up to the first code line), unmarked
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
}

eval_usage() {  # the calling script's header, then this file's
    header "$0"
    echo
    header "${BASH_SOURCE[0]}"
}

eval_fail() {
    echo "eval.sh: $*" >&2
    exit 2
}

_sglang_start() {  # <hf dir> <out dir>: start SGLang in its own process group, wait for health;
    # sets SGLANG_URL (not called in a subshell: the EXIT trap must belong to this script)
    local model="$1" out="$2" port="${SGLANG_PORT:-30000}" deadline
    mkdir -p "$out"
    setsid "${SGLANG_PYTHON:-python3}" -m sglang.launch_server --model-path "$model" \
        --host 127.0.0.1 --port "$port" --tp-size "${SGLANG_TP:-1}" \
        >"$out/sglang.log" 2>&1 &
    SGLANG_PID=$!
    echo "$SGLANG_PID" >"$out/sglang.pid"
    trap '_sglang_stop' EXIT
    deadline=$((SECONDS + ${SGLANG_START_TIMEOUT:-900}))
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
        kill -0 "$SGLANG_PID" 2>/dev/null || eval_fail "SGLang exited; see $out/sglang.log"
        [ "$SECONDS" -lt "$deadline" ] || eval_fail "SGLang not healthy in time; see $out/sglang.log"
        sleep 2
    done
    SGLANG_URL="http://127.0.0.1:$port"
}

_sglang_stop() {  # stop only the process group this script started
    if [ -n "${SGLANG_PID:-}" ] && kill -0 "$SGLANG_PID" 2>/dev/null; then
        kill -TERM -- "-$SGLANG_PID" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$SGLANG_PID" 2>/dev/null || break; sleep 1; done
        kill -KILL -- "-$SGLANG_PID" 2>/dev/null || true
    fi
}

_check_complete() {  # <hf dir>: exit 2 naming it unless it holds a complete model (before a
    # server starts on it; the check is the standard library's alone: any python3 runs it)
    PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" \
        -m evolving_rl.local.checkpoints "$1" || eval_fail "refusing to serve $1"
}

_convert_torch_dist() {  # <torch_dist dir> <hf base> <out>: HF folder (converted once)
    local src="$1" base="$2" dst="$3" slime="${SLIME_DIR:-$ROOT/slime}"
    [ -n "$base" ] || eval_fail "--torch-dist needs --hf-base DIR (the original HF folder)"
    if [ ! -d "$src" ]; then
        local saved
        saved="$(shopt -s nullglob; cd "$(dirname "$src")" 2>/dev/null && printf '%s ' iter_*)"
        eval_fail "no checkpoint at $src; $(dirname "$src") holds: ${saved:-no iter_* folder}"
    fi
    [ -f "$slime/tools/convert_torch_dist_to_hf.py" ] \
        || eval_fail "slime is missing at $slime (git submodule update --init slime)"
    if [ ! -f "$dst/config.json" ]; then
        "${SGLANG_PYTHON:-python3}" "$slime/tools/convert_torch_dist_to_hf.py" \
            --input-dir "$src" --output-dir "$dst" --origin-hf-dir "$base" >&2
    fi
    echo "$dst"
}

eval_main() {
    local config="$1" mode="" target="" hf_base="" out="" args=()
    shift
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) eval_usage; exit 0 ;;
            --hf|--url|--openai-url|--torch-dist|--local)
                [ -z "$mode" ] || eval_fail "give one checkpoint option, not $mode and $1"
                [ $# -ge 2 ] || eval_fail "$1 needs a value"
                mode="$1"; target="$2"; shift 2 ;;
            --hf-base) [ $# -ge 2 ] || eval_fail "--hf-base needs a value"; hf_base="$2"; shift 2 ;;
            --config) [ $# -ge 2 ] || eval_fail "--config needs a value"; config="$2"; shift 2 ;;
            --out) [ $# -ge 2 ] || eval_fail "--out needs a value"; out="$2"; shift 2 ;;
            *) args+=("$1"); shift ;;
        esac
    done
    [ -n "$mode" ] || eval_fail "give a checkpoint: --hf, --url, --openai-url, --torch-dist or --local (--help)"
    out="${out:-runs/eval/$(basename "${config%.yaml}")-$(basename "$target")}"
    case "$mode" in
        --torch-dist)
            target="$(_convert_torch_dist "$target" "$hf_base" "$out/hf")"
            _sglang_start "$target" "$out"
            args+=(--sglang-url "$SGLANG_URL" --tokenizer "$target") ;;
        --hf)
            _check_complete "$target"
            _sglang_start "$target" "$out"
            args+=(--sglang-url "$SGLANG_URL" --tokenizer "$target") ;;
        --url) args+=(--sglang-url "$target") ;;
        --openai-url) args+=(--openai-url "$target") ;;
        --local) args+=(--local "$target") ;;
    esac
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    local py="${PYTHON:-$ROOT/.venv/bin/python}" path="$ROOT"
    [ "${EVOLVING_RL_SETUP:-}" != skip ] || py="${PYTHON:-python3}" path="$ROOT/src:$ROOT"
    export PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}"
    "$py" -m evolving_rl.evaluate --config "$config" --out "$out" \
        "${args[@]}"
}
