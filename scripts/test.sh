#!/usr/bin/env bash
# Run the whole test suite: creates or reuses .venv, installs SEAD with its test extras, runs pytest.
# Extra arguments go to pytest (e.g. bash scripts/test.sh -k controller).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" test
cd "$ROOT"
exec python -m pytest "$@"
