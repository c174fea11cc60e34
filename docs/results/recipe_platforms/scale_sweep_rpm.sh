#!/bin/bash
# Item 13 of README.md: evaluate rpm runs on the test flights with the s that item 11 calibrated
# (<run>/overlay_allan.yaml, from recalibrate_rpm.sh) multiplied by 0.5, 2 and 4. A diagnostic on the test flights
# themselves (an oracle), not a recipe: it shows how far each model's fused AVE depends on the filter's trust.
# Writes <run>/eval_s_x<factor>/. Usage: scale_sweep_rpm.sh STUDY_DIR RUN...   (two evaluations at a time)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export STUDY=$1 P=$here/rpm_calibrated_imu.yaml; shift
one() {
  R=$STUDY/$1
  s=$(awk '/variance_scale:/ {print $2}' "$R/overlay_allan.yaml")
  mkdir -p "$R/eval_s_x$2"
  printf '/**/velobins_net:\n  ros__parameters:\n    predictor:\n      variance_scale: %s\n' \
    "$(python3 -c "print(round($s * $2, 4))")" > "$R/eval_s_x$2.yaml"
  velobins evaluate --checkpoint "$R/best.pt" --dataset csv --data "$STUDY/sim/rpm_test" --params "$P" \
    --params "$R/eval_s_x$2.yaml" --threads 1 --no-imu-only --cache-dir "$STUDY/cache" --overwrite \
    --out "$R/eval_s_x$2" > "$R/eval_s_x$2.log" 2>&1
  echo "done $1 x$2"
}
export -f one
for run in "$@"; do for f in 0.5 2 4; do echo "$run $f"; done; done | xargs -P 2 -n 2 bash -c 'one "$0" "$1"'
