#!/usr/bin/env bash
# Evaluate models on the seeded test set: a thin wrapper over `sead eval`. Creates or reuses .venv first.
#   bash scripts/eval.sh outputs/runs/RUN                       # the run's newest checkpoint
#   bash scripts/eval.sh RUN/checkpoints/step_000004 /models/Qwen2.5-14B-Instruct eval.trials=4
#   bash scripts/eval.sh openai:gpt-4o@https://api.openai.com/v1 usersim=openai usersim.base_urls=[...]
# On a machine without a GPU the CPU preset (first 16 test profiles, 8 turns: enough for the SOP) is the default.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
ARGS=("$@")
source "$ROOT/scripts/default_preset.sh"
exec sead eval "${ARGS[@]}"
