#!/usr/bin/env bash
# Source ROS 2 and the VeloBins workspace, put the image's venv first on PATH, run the command.
# Without a command (the image's default CMD is `usage`) it prints how to run the image and exits 2:
# the drone stack needs a model (model_path:=...), so nothing runs by default.
set -e
usage() {
    cat <<'USAGE'
VeloBins image: give the command to run. The drone stack needs a model:

  docker run --rm -it --network host -v $PWD/models:/models:ro velobins:vehicle \
      ros2 launch velobins_bringup drone.launch.py model_path:=/models/best.pt

  replay a bag and evaluate it:
      ros2 launch velobins_bringup replay_eval.launch.py bag:=/data/flight_bag \
          model_path:=/models/best.pt output_dir:=/data/report
  the command line:   velobins --help
  RViz (image velobins:viz, needs an X server): see docs/docker.md
USAGE
}
# colcon's and ROS's setup scripts read unset variables: no `set -u` here.
# shellcheck disable=SC1090
source "/opt/ros/${ROS_DISTRO}/setup.bash"
# shellcheck disable=SC1091
source /ws/install/setup.bash
# After the setup scripts (they prepend /opt/ros/.../bin): the venv's python3 and pip come first.
export VIRTUAL_ENV="${VIRTUAL_ENV:-/opt/velobins/venv}"
export PATH="${VIRTUAL_ENV}/bin:/ws/install/velobins_eval/lib/velobins_eval:${PATH}"
case "${1:-usage}" in
    usage) usage >&2; exit 2 ;;
    -h|--help) usage; exit 0 ;;
esac
exec "$@"
