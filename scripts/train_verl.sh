#!/usr/bin/env bash
# The verl backend on a GPU node (scripts/main.sh hands over here for backend=verl or a gpu preset):
#   1. checks for GPUs before installing or starting anything;
#   2. sets up its own environment (.venv-verl: verl's GPU extras pin torch 2.11 + vLLM, unlike the CPU .venv);
#   3. serves the user simulator on verl.usersim_gpus unless usersim.base_urls is given, and stops those
#      servers (by the PIDs it started) on exit, error or Ctrl-C;
#   4. runs `sead train` on the remaining GPUs.
# Arguments are Hydra overrides, as for main.sh. Multi-node: `ray start` on every node first (docs/gpus.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARGS=("$@")
die() { echo "[sead verl] error: $*" >&2; exit 2; }
log() { echo "[sead verl] $*" >&2; }
has_arg() { printf '%s\n' "${ARGS[@]:-}" | grep -q -- "$1"; }

command -v nvidia-smi >/dev/null 2>&1 \
  || die "backend=verl needs NVIDIA GPUs, and this machine has no nvidia-smi (no GPU driver). Train here with the embedded backend: bash scripts/main.sh"
NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
[ "${NGPU:-0}" -ge 1 ] || die "backend=verl needs NVIDIA GPUs, and nvidia-smi lists none"
has_arg '^backend=verl$' || ARGS=("backend=verl" "${ARGS[@]}")

VENV="${SEAD_VERL_VENV:-$ROOT/.venv-verl}"
STAMP="$VENV/.sead-verl-installed"
WANT="$(cat "$ROOT/requirements.txt" "$ROOT/setup.py" | sha256sum | cut -c1-16)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  log "installing verl 0.9.1 with vLLM and FSDP into $VENV (first run downloads several GB)"
  [ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "verl[vllm,fsdp]==0.9.1"
  # verl's extras choose torch and transformers here; SEAD's other requirements come on top, SEAD without deps.
  "$VENV/bin/python" -m pip install -q -r <(grep -v -E '^(torch|transformers)[=<>]' "$ROOT/requirements.txt")
  "$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"

PLAN="$(python -m sead.verl_backend.preflight plan "$NGPU" "${ARGS[@]}")" || exit 2
while IFS='=' read -r key value; do
  case "$key" in
    USERSIM_GPUS) USERSIM_GPUS="$value" ;; TRAIN_GPUS) TRAIN_GPUS="$value" ;;
    USERSIM_PORT) USERSIM_PORT="$value" ;; USERSIM_MEMORY) USERSIM_MEMORY="$value" ;;
    USERSIM_MODEL) USERSIM_MODEL="$value" ;; USERSIM_NAME) USERSIM_NAME="$value" ;;
  esac
done <<< "$PLAN"

if [ "$USERSIM_NAME" = openai ] && ! has_arg '^usersim.base_urls='; then
  [ -n "$USERSIM_GPUS" ] || die "set verl.usersim_gpus=[...] to serve the user simulator, or give usersim.base_urls=[...]"
  PID_FILE="$ROOT/outputs/usersim/verl-$$.pids"
  # Stop exactly the servers this script started: serve_user_sim.sh --stop kills only the PIDs in its file.
  trap 'bash "$ROOT/scripts/serve_user_sim.sh" --stop --pid-file "$PID_FILE"' EXIT
  trap 'exit 130' INT TERM
  log "serving the user simulator $USERSIM_MODEL on GPUs $USERSIM_GPUS"
  SERVED="$(bash "$ROOT/scripts/serve_user_sim.sh" --detach --gpus "$USERSIM_GPUS" --port "$USERSIM_PORT" \
            --gpu-memory-utilization "$USERSIM_MEMORY" --pid-file "$PID_FILE" "$USERSIM_MODEL")"
  read -r -a SERVED_ARGS <<< "$SERVED"
  ARGS+=("${SERVED_ARGS[@]}")
fi

log "training on GPUs $TRAIN_GPUS"
# Not exec: the EXIT trap must still stop the user-simulator servers after training.
CUDA_VISIBLE_DEVICES="$TRAIN_GPUS" sead train "${ARGS[@]}"
