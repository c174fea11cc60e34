#!/usr/bin/env bash
# The test command of the README and of CI: set up (idempotent), lint, then one pytest run over
# all packages. ROS-dependent tests must run here (VELOBINS_REQUIRE_ROS=1 turns a skip into a failure).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
# Headless Chromium renders report.html in velobins_eval/test/test_report_html.py (Debian's package;
# the test skips with a reason where it is missing). Installed once where apt-get can (root, CI).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing chromium (once; for the report.html render test)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
        >/tmp/velobins-chromium-install.log 2>&1 || echo "chromium not installed (see /tmp/velobins-chromium-install.log): the render test will skip"
fi
# shellcheck disable=SC1091
source "$ROOT/scripts/env.sh"
cd "$ROOT"
# Small matrices throughout: a multithreaded BLAS only fights the nodes and torch for the cores.
export VELOBINS_REQUIRE_ROS=1 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1
echo "== ruff"
ruff check . && ruff format --check .
echo "== pytest"
exec python -m pytest -p no:cacheprovider "$@"
