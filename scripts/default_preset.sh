# Sourced by scripts/main.sh and scripts/eval.sh: on a machine without a GPU, and unless the caller chose a
# preset or resumes a run (which continues under its own settings), put preset=cpu first in ARGS (the caller's
# overrides still win).
if ! printf '%s\n' "${ARGS[@]:-}" | grep -q -E '^(preset=|resume=true$)' && \
   ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  ARGS=("preset=cpu" "${ARGS[@]}")
fi
