#!/usr/bin/env bash
# Serve the user-simulator model with vLLM's OpenAI-compatible server, one instance per GPU (or per group
# of GPUs with --instances), on consecutive ports. Prints the Hydra overrides that point SEAD at them.
# vLLM runs in its own venv because it pins its own torch and transformers (requirements_vllm.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<EOF
Usage: bash scripts/serve_user_sim.sh [options] MODEL [-- extra vllm serve args]
       bash scripts/serve_user_sim.sh --stop [--pid-file PATH]

Starts 'vllm serve MODEL' instances, waits until each answers GET /v1/models, then prints one line:
  usersim.base_urls=[http://127.0.0.1:8000/v1,...] usersim.model=MODEL
to append to a sead command or scripts/main.sh. Stays in the foreground and stops its instances on exit or Ctrl-C.

Options:
  --gpus LIST                   GPU ids, comma-separated (default: \$CUDA_VISIBLE_DEVICES or 0)
  --instances N                 instances to start; the GPUs are split evenly and each instance uses
                                tensor parallelism over its share (default: one per GPU)
  --port P                      port of the first instance; the others use P+1, P+2, ... (default 8000)
  --host H                      address to listen on (default 127.0.0.1)
  --max-model-len N             context length (default 8192)
  --gpu-memory-utilization F    fraction of GPU memory vLLM may take (default 0.70)
  --venv DIR                    vLLM environment, created from requirements_vllm.txt when missing
                                (default: \$SEAD_USERSIM_VENV or .venv-usersim)
  --pid-file PATH               where the instance PIDs are written (default outputs/usersim/vllm.pids)
  --wait SECONDS                how long to wait for each instance to become healthy (default 900)
  --detach                      return once healthy and leave the instances running (stop with --stop)
  --stop                        stop the instances listed in the PID file, and nothing else
  --dry-run                     print the commands without running anything
  -h, --help                    this text
EOF
}

die() { echo "serve_user_sim: $*" >&2; exit 2; }
log() { echo "[usersim] $*" >&2; }

GPUS="${CUDA_VISIBLE_DEVICES:-0}" INSTANCES="" PORT=8000 HOST=127.0.0.1 MAX_LEN=8192 MEM_UTIL=0.70
VENV="${SEAD_USERSIM_VENV:-$ROOT/.venv-usersim}" PID_FILE="$ROOT/outputs/usersim/vllm.pids" WAIT=900
DETACH=0 STOP=0 DRY=0 MODEL="" EXTRA=()

value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) value "$@"; GPUS="$2"; shift 2 ;;
    --instances) value "$@"; INSTANCES="$2"; shift 2 ;;
    --port) value "$@"; PORT="$2"; shift 2 ;;
    --host) value "$@"; HOST="$2"; shift 2 ;;
    --max-model-len) value "$@"; MAX_LEN="$2"; shift 2 ;;
    --gpu-memory-utilization) value "$@"; MEM_UTIL="$2"; shift 2 ;;
    --venv) value "$@"; VENV="$2"; shift 2 ;;
    --pid-file) value "$@"; PID_FILE="$2"; shift 2 ;;
    --wait) value "$@"; WAIT="$2"; shift 2 ;;
    --detach) DETACH=1; shift ;;
    --stop) STOP=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$MODEL" ] || die "one MODEL only, got '$MODEL' and '$1'"; MODEL="$1"; shift ;;
  esac
done

# Print the command in dry-run mode, otherwise run it.
run() {
  if [ "$DRY" = 1 ]; then printf '%q ' "$@" | sed 's/ $//'; echo; else "$@"; fi
}

# Stop only PIDs we started that still run vLLM: a PID file can outlive its processes, and PIDs get reused.
stop_pids() {
  local pid deadline ours=()
  for pid in "$@"; do
    # -ww: without it ps cuts the command line at 80 columns, often before 'vllm' when paths are long.
    if ps -ww -o args= -p "$pid" 2>/dev/null | grep -q vllm; then ours+=("$pid"); fi
  done
  [ "${#ours[@]}" -gt 0 ] || return 0
  run kill -TERM "${ours[@]}"
  [ "$DRY" = 1 ] && return 0
  deadline=$((SECONDS + 30))
  for pid in "${ours[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
}

if [ "$STOP" = 1 ]; then
  [ -f "$PID_FILE" ] || { log "no PID file at $PID_FILE: nothing to stop"; exit 0; }
  read -r -a OLD_PIDS < "$PID_FILE" || true
  log "stopping ${OLD_PIDS[*]:-nothing}"
  stop_pids "${OLD_PIDS[@]}"
  [ "$DRY" = 1 ] || rm -f "$PID_FILE"
  exit 0
fi

[ -n "$MODEL" ] || { usage >&2; die "MODEL is required"; }
IFS=, read -r -a GPU_LIST <<< "$GPUS"
[ "${#GPU_LIST[@]}" -ge 1 ] || die "--gpus needs at least one GPU id"
INSTANCES="${INSTANCES:-${#GPU_LIST[@]}}"
[[ "$INSTANCES" =~ ^[1-9][0-9]*$ ]] || die "--instances must be a positive integer, got '$INSTANCES'"
[[ "$PORT" =~ ^[0-9]+$ ]] || die "--port must be a number, got '$PORT'"
[ $(( ${#GPU_LIST[@]} % INSTANCES )) -eq 0 ] \
  || die "--instances $INSTANCES must divide the number of GPUs (${#GPU_LIST[@]}: $GPUS)"
TP=$(( ${#GPU_LIST[@]} / INSTANCES ))
RUN_DIR="$(dirname "$PID_FILE")"

if [ -f "$PID_FILE" ] && [ "$DRY" = 0 ]; then
  read -r -a OLD_PIDS < "$PID_FILE" || true
  for pid in "${OLD_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && die "instances from $PID_FILE still run (${OLD_PIDS[*]}); use --stop first"
  done
fi

if [ ! -x "$VENV/bin/vllm" ]; then
  log "creating the vLLM environment $VENV (first run downloads several GB)"
  run "${PYTHON:-python3}" -m venv "$VENV"
  run "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$ROOT/requirements_vllm.txt"
fi

PIDS=() URLS=()
cleanup() {
  if [ "$DETACH" = 0 ] && [ "${#PIDS[@]}" -gt 0 ]; then
    log "stopping ${PIDS[*]}"
    stop_pids "${PIDS[@]}"
    rm -f "$PID_FILE"
  fi
}
[ "$DRY" = 1 ] || { mkdir -p "$RUN_DIR"; trap cleanup EXIT; trap 'exit 130' INT TERM; }

for ((i = 0; i < INSTANCES; i++)); do
  group="$(IFS=,; echo "${GPU_LIST[*]:i*TP:TP}")"
  port=$((PORT + i))
  cmd=(env "CUDA_VISIBLE_DEVICES=$group" "$VENV/bin/vllm" serve "$MODEL" --host "$HOST" --port "$port"
       --tensor-parallel-size "$TP" --max-model-len "$MAX_LEN" --gpu-memory-utilization "$MEM_UTIL"
       ${EXTRA[@]+"${EXTRA[@]}"})
  [ "$DETACH" = 0 ] || cmd=(nohup "${cmd[@]}")  # detached instances must survive the terminal closing
  URLS+=("http://$HOST:$port/v1")
  if [ "$DRY" = 1 ]; then run "${cmd[@]}"; continue; fi
  log "starting instance $i on GPU $group, port $port (log: $RUN_DIR/vllm_$port.log)"
  "${cmd[@]}" > "$RUN_DIR/vllm_$port.log" 2>&1 &
  PIDS+=($!)
  echo "${PIDS[*]}" > "$PID_FILE"
done

# Anything that answers, even 401 when vLLM runs with --api-key, means the server is up.
healthy() {
  "${PYTHON:-python3}" - "$1/models" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=3)
except urllib.error.HTTPError:
    pass
except OSError:
    sys.exit(1)
PY
}

if [ "$DRY" = 0 ]; then
  for i in "${!PIDS[@]}"; do
    deadline=$((SECONDS + WAIT)) port=$((PORT + i))
    until healthy "${URLS[$i]}"; do
      kill -0 "${PIDS[$i]}" 2>/dev/null \
        || { tail -n 20 "$RUN_DIR/vllm_$port.log" >&2; die "instance on port $port exited; see $RUN_DIR/vllm_$port.log"; }
      [ "$SECONDS" -lt "$deadline" ] || die "instance on port $port not healthy after ${WAIT}s; see $RUN_DIR/vllm_$port.log"
      sleep 0.5
    done
    log "healthy: ${URLS[$i]}"
  done
fi

echo "usersim.base_urls=[$(IFS=,; echo "${URLS[*]}")] usersim.model=$MODEL"
[ "$DRY" = 0 ] || exit 0
if [ "$DETACH" = 1 ]; then log "left running; stop with: bash scripts/serve_user_sim.sh --stop"; exit 0; fi
log "serving; Ctrl-C stops the instances"
wait -n "${PIDS[@]}" || true
die "an instance exited; stopping the others"
