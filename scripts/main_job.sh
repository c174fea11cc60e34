#!/usr/bin/env bash
# The README's main job: set up (idempotent), then `velobins demo` — the shipped Crazyflie 2.1 models
# (VeloBins G+H^B and the regression baseline, trained on NanoBench) replayed on the two shipped
# held-out NanoBench flights through the ROS 2 node graph, against IMU-only, with the table and the
# plots. No download, no training. Extra arguments go to the demo (`bash scripts/main_job.sh --help`);
# `--simulated` runs the earlier main job (simulate flights, train both models on them, replay).
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
