#!/usr/bin/env bash
# The README's main job: set up (idempotent), then `velobins demo` — simulate nano-quad flights,
# train VeloBins (G+H, SPE) and the regression baseline, convert held-out flights to rosbag2, replay
# them through the ROS 2 node graph and print the comparison table. Extra arguments go to the demo
# (`bash scripts/main_job.sh --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
# shellcheck disable=SC1091
source "$ROOT/scripts/env.sh"
cd "$ROOT"
export MPLBACKEND=Agg
exec velobins demo "$@"
