#!/usr/bin/env bash
# Run SEAD's training loop. Creates or reuses .venv, installs what is missing, then runs `sead train`.
# Arguments are Hydra overrides, e.g.:
#   bash scripts/main.sh trainer.steps_per_iteration=20 usersim=openai usersim.base_urls=[http://127.0.0.1:8000/v1]
# On a machine without a GPU the CPU preset (SmolLM2-135M, scripted user, ~10 minutes) is the default.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The verl backend runs on GPU nodes, with its own environment and user-simulator servers.
if printf '%s\n' "$@" | grep -q -E '^(backend=verl|preset=gpu[0-9]+)$'; then
  exec bash "$ROOT/scripts/train_verl.sh" "$@"
fi
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
ARGS=("$@")
source "$ROOT/scripts/default_preset.sh"
exec sead train "${ARGS[@]}"
