#!/usr/bin/env bash
# Refresh requirements.lock, the one set of versions that main.sh, eval.sh and test.sh install, from the ranges
# in requirements.txt and setup.py's test and verl extras. Run after editing either, then commit the lock:
#   bash scripts/lock.sh
# torch is resolved against its CPU build but left out of the lock: setup_env.sh installs it with pip first.
# TORCH_CPU_WHEELS points at that build (default: pip's find-links, else PyTorch's CPU index).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
WHEELS="${TORCH_CPU_WHEELS:-$(python -m pip config get global.find-links 2>/dev/null || true)}"
if [ -n "$WHEELS" ]; then WHERE=(--find-links "$WHEELS"); else WHERE=(--extra-index-url https://download.pytorch.org/whl/cpu); fi
uv pip compile setup.py --extra test --extra verl --python-version 3.11 "${WHERE[@]}" --no-emit-package torch \
  --no-header --quiet -o requirements.lock
echo "requirements.lock: $(grep -c '==' requirements.lock) pinned packages (transformers $(grep '^transformers==' requirements.lock | cut -d= -f3))"
