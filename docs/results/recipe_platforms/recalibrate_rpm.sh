#!/bin/bash
# Item 11 of README.md: the rpm own-vehicle flow of bench_recipe_platforms.py (calibrate s on the run's held-out
# flight, evaluate on the test flights) with the filter `velobins calibrate` gives by default since 2026-11-27
# (rpm_calibrated_imu.yaml: the Allan densities of flights 0-9, the filter's default random walks) instead of
# rpm_imu_noise.yaml (the true densities and the true random walks). Writes <run>/overlay_allan.yaml and
# <run>/eval_cal_allan/. Usage: recalibrate_rpm.sh STUDY_DIR RUN...   (e.g. runs/recipe28 rpm_5min_gh_valfloor)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
study=$1; shift
P=$here/rpm_calibrated_imu.yaml
for run in "$@"; do
  R=$study/$run
  velobins calibrate --dataset csv --checkpoint "$R/best.pt" --heldout "$R/heldout" --params "$P" --fit variance_scale \
     --workers 1 --threads 1 --overwrite --out "$R/overlay_allan.yaml" > "$R/calibrate_allan.log" 2>&1
  velobins evaluate --checkpoint "$R/best.pt" --dataset csv --data "$study/sim/rpm_test" --params "$P" \
     --params "$R/overlay_allan.yaml" --threads 1 --no-imu-only --cache-dir "$study/cache" --overwrite \
     --out "$R/eval_cal_allan" > "$R/eval_cal_allan.log" 2>&1
  echo "done $run"
done
