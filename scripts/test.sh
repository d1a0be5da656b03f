#!/usr/bin/env bash
# Run the whole test suite: creates or reuses .venv, installs the locked environment, runs pytest.
# Extra arguments go to pytest (e.g. bash scripts/test.sh -k controller).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# The report test opens report.html in headless Chromium: Debian's package, installed once.
if ! command -v chromium >/dev/null 2>&1; then
  echo "[sead] installing Debian's chromium for the report test (once)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } >/dev/null \
    || { echo "[sead] could not install chromium; install it with: apt-get install chromium" >&2; exit 1; }
fi
exec python -m pytest "$@"
