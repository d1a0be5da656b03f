#!/usr/bin/env bash
# Run SEAD's training loop. Creates or reuses .venv, installs what is missing, then runs `sead train`.
# Arguments are Hydra overrides, e.g.:
#   bash scripts/main.sh trainer.steps_per_iteration=20 usersim=openai usersim.base_urls=[http://127.0.0.1:8000/v1]
# On a machine without a GPU the CPU preset (SmolLM2-135M, scripted user, ~10 minutes) is the default.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" ""
cd "$ROOT"
ARGS=("$@")
if ! printf '%s\n' "${ARGS[@]:-}" | grep -q '^preset=' && \
   ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  ARGS=("preset=cpu" "${ARGS[@]}")
fi
exec sead train "${ARGS[@]}"
