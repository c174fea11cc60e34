#!/usr/bin/env bash
# The README's main job: set up (idempotent), then `velobins demo` — simulate nano-quad flights,
# train VeloBins (G+H, SPE) and the regression baseline, convert held-out flights to rosbag2, replay
# them through the ROS 2 node graph and print the comparison table. Extra arguments go to the demo
# (`bash scripts/main_job.sh --help`).
# Re-runnable by design: it passes --overwrite, so each run replaces the demo run in runs/main_job/
# (or --out); `velobins demo` alone refuses to replace an earlier run without that flag.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
# shellcheck disable=SC1091
source "$ROOT/scripts/env.sh"
cd "$ROOT"
export MPLBACKEND=Agg
exec velobins demo --overwrite "$@"
