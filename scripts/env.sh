# Source me (bash): `source scripts/env.sh` — the VeloBins venv plus the colcon workspace overlay.
# Run scripts/bootstrap.sh once first (the README commands do it for you).
_vb_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_vb_venv="${VELOBINS_VENV:-$_vb_root/.venv}"
if [ ! -f "$_vb_root/install/local_setup.bash" ]; then
    echo "VeloBins workspace not built yet: run $_vb_root/scripts/bootstrap.sh" >&2
    return 1 2>/dev/null || exit 1
fi
# colcon's and venv's setup scripts read unset variables: relax `set -u` while sourcing them.
case $- in *u*) _vb_nounset=1; set +u ;; *) _vb_nounset= ;; esac
# shellcheck disable=SC1091
source "$_vb_venv/bin/activate"
export AMENT_PREFIX_PATH="$_vb_venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export CMAKE_PREFIX_PATH="$_vb_venv${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
# shellcheck disable=SC1091
source "$_vb_root/install/local_setup.bash"
# The `velobins` command line (ament_python puts console scripts in lib/<pkg>, the place `ros2 run` looks).
export PATH="$_vb_root/install/velobins_eval/lib/velobins_eval:$PATH"
[ -n "$_vb_nounset" ] && set -u
unset _vb_root _vb_venv _vb_nounset
