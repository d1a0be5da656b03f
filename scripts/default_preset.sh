# Sourced by scripts/main.sh and scripts/eval.sh: on a machine without a GPU, and unless the caller chose a
# preset, put preset=cpu first in ARGS (the caller's overrides still win).
if ! printf '%s\n' "${ARGS[@]:-}" | grep -q '^preset=' && \
   ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  ARGS=("preset=cpu" "${ARGS[@]}")
fi
