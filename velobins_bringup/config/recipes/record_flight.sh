#!/usr/bin/env bash
# Record a flight you can later train and evaluate on (docs/vehicles.md, "Recording a flight").
#
#   bash record_flight.sh OUTPUT_BAG [NAMESPACE]        e.g.  bash record_flight.sh flights/hover_01 /cf231
#
# Records what the network reads (the bridges' outputs imu and rotor_speeds, in SI units and the
# body frame), the ground truth (ground_truth/odometry: remap your motion-capture bridge's
# nav_msgs/Odometry there, pose of the body in a z-up world frame), the estimates (to compare
# against later), the static transforms and the diagnostics, in mcap. Read it back with
#   velobins convert --dataset rosbag --input OUTPUT_BAG --output flight_bag
# or train and evaluate on a folder of such bags directly: velobins train --dataset rosbag --data flights/
set -euo pipefail
out="${1:?usage: record_flight.sh OUTPUT_BAG [NAMESPACE]}"
ns="${2:-}"
ns="${ns%/}"
exec ros2 bag record --storage mcap --output "$out" \
  "$ns/imu" \
  "$ns/rotor_speeds" \
  "$ns/ground_truth/odometry" \
  "$ns/velobins/velocity" \
  "$ns/velobins/twist" \
  "$ns/velobins/odometry" \
  /tf_static \
  /diagnostics
