#!/usr/bin/env bash
# The test command of the README and of CI: set up (idempotent), lint, then one pytest run over
# all packages. ROS-dependent tests must run here (VELOBINS_REQUIRE_ROS=1 turns a skip into a failure).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
# shellcheck disable=SC1091
source "$ROOT/scripts/env.sh"
cd "$ROOT"
# Small matrices throughout: a multithreaded BLAS only fights the nodes and torch for the cores.
export VELOBINS_REQUIRE_ROS=1 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1
echo "== ruff"
ruff check . && ruff format --check .
echo "== pytest"
exec python -m pytest -p no:cacheprovider "$@"
