#!/usr/bin/env bash
# The own-vehicle flow of items 30-38 on NanoBench (`flow_g`): calibrate a checkpoint's network variance (and, for
# an ensemble, its disagreement weight) on nine training flights of every style, then evaluate on NanoBench val.
#
#   bash docs/results/recipe_platforms/flow.sh STUDY NAME CHECKPOINT FIT [START]
#
# STUDY is the study folder (its `cal9/` is made here, from cal9_flights.txt); NAME names `STUDY/flow/NAME/`, which
# holds `overlay.yaml` (calibrate's), `eval_val/metrics.json` (evaluate's) and `flow.log`. FIT is calibrate's --fit:
# `variance_scale` for one network, `variance_scale,disagreement_scale` for an ensemble. The filter is NanoBench's
# hand-tuned file, the IMU noise measured on the nine flights (item 24) and the gyro-bias prior of item 30. START, an
# earlier flow's overlay, is calibrate's last --params: what FIT leaves out is kept from it (item 40 fits
# `axis_variance_factors` alone from each item-38 flow's s and b).
set -euo pipefail
study=$1 name=$2 ckpt=$3 fit=$4 start=${5:-}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
train="$root/../shared/data/nanobench/train"
cal9="$study/cal9"
mkdir -p "$cal9"
while read -r flight; do
    for f in "$train/$flight".csv.gz "$train/${flight}"_metadata.yaml; do
        [ -e "$cal9/$(basename "$f")" ] || ln -s "$(realpath "$f")" "$cal9/$(basename "$f")"
    done
done < "$here/cal9_flights.txt"
params=(--params "$root/velobins_bringup/config/nanobench.yaml" --params "$here/nanobench_cal9_imu.yaml"
        --params "$here/gyro_prior.yaml")
out="$study/flow/$name"
mkdir -p "$out"
{
    nice -n 5 velobins calibrate --dataset nanobench --checkpoint "$ckpt" --heldout "$cal9" "${params[@]}" \
        ${start:+--params "$start"} --fit "$fit" --workers 1 --threads 1 --overwrite --out "$out/overlay.yaml"
    nice -n 5 velobins evaluate --checkpoint "$ckpt" --dataset nanobench --data "$root/../shared/data/nanobench/val" \
        "${params[@]}" --params "$out/overlay.yaml" --no-imu-only --threads 1 --overwrite --out "$out/eval_val"
} > "$out/flow.log" 2>&1
