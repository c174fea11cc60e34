#!/usr/bin/env bash
# Idempotent set-up of a VeloBins development workspace on a plain Debian + Python 3.11 machine.
#
#   1. a virtual environment (.venv, or $VELOBINS_VENV) with the pinned packages of
#      requirements.lock: ROS 2 Kilted from PyPI wheels (rclpy over Fast DDS), torch 2.13.0 CPU, ...
#   2. repairs of what the ROS wheels get wrong for a colcon build (see "repair" below);
#   3. a tiny tf2_msgs overlay (TFMessage only) when no tf2_msgs is installed: the ROS PyPI wheel
#      set lacks it, and the EKF node publishes /tf with it;
#   4. `colcon build --symlink-install` of the workspace;
#   5. the native CPU kernels of velobins_net, compiled into ~/.cache/velobins (optional).
#
# Each step is skipped when a stamp shows its inputs are unchanged, so a warm re-run takes seconds.
# Afterwards `source scripts/env.sh` gives a shell with the venv and the workspace overlay.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VELOBINS_VENV:-$ROOT/.venv}"
PYTHON="${VELOBINS_PYTHON:-python3.11}"
LOCK="$ROOT/requirements.lock"
STAMPS="$VENV/.velobins"
say() { printf '\033[1mbootstrap:\033[0m %s\n' "$*"; }
hash_of() { sha256sum "$@" | sha256sum | cut -c1-16; }

command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null || {
    echo "bootstrap: Python 3.11 is required (the ROS 2 Kilted wheels are cp311); found: $("$PYTHON" --version 2>&1)" >&2
    exit 1
}

# --- 1. virtual environment + pinned packages --------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV"
    "$PYTHON" -m venv "$VENV"
fi
mkdir -p "$STAMPS"
touch "$VENV/COLCON_IGNORE"  # the wheels ship package.xml files colcon must not crawl
req_hash="$(hash_of "$LOCK")"
if [ "$(cat "$STAMPS/requirements" 2>/dev/null)" != "$req_hash" ]; then
    say "installing pinned packages (requirements.lock; about a minute on a fresh machine)"
    # torch first and alone: `torch==2.13.0` resolves to the local CPU build; pulling it in as a
    # dependency of something else could select a multi-GB CUDA build instead.
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$(grep -E '^torch==' "$LOCK")"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$LOCK"
    echo "$req_hash" >"$STAMPS/requirements"
    rm -f "$STAMPS/repair"
fi

# --- 2. repair the ROS wheels -------------------------------------------------------------------
# Exported CMake targets of the message wheels name include directories of the machine that built
# them (/opt/python/cp311-cp311/...). Point them at this interpreter's headers and numpy.
if [ ! -f "$STAMPS/repair" ]; then
    py_inc="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    np_inc="$("$VENV/bin/python" -c 'import numpy; print(numpy.get_include())')"
    [ -f "$py_inc/Python.h" ] || { echo "bootstrap: Python headers missing at $py_inc (apt-get install python3.11-dev)" >&2; exit 1; }
    mapfile -t broken < <(grep -rl --include='*.cmake' '/opt/python/cp311-cp311' "$VENV" 2>/dev/null || true)
    if [ "${#broken[@]}" -gt 0 ]; then
        say "repairing ${#broken[@]} CMake export files that name the wheel builder's paths"
        sed -i \
            -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$np_inc#g" \
            -e "s#/opt/python/cp311-cp311/include/python3.11#$py_inc#g" \
            "${broken[@]}"
    fi
    touch "$STAMPS/repair"
fi

# --- 3. tf2_msgs overlay (only where no tf2_msgs exists) ---------------------------------------
VENDOR="$ROOT/build/vendor"
base_paths=("$ROOT")
if ! "$VENV/bin/python" -c 'import tf2_msgs' 2>/dev/null && [ ! -d "$VENV/share/tf2_msgs" ]; then
    base_paths+=("$VENDOR")
    if [ ! -f "$VENDOR/tf2_msgs/package.xml" ]; then
        say "writing a minimal tf2_msgs (TFMessage) overlay: the ROS wheel set has none"
        mkdir -p "$VENDOR/tf2_msgs/msg"
        cp "$ROOT/scripts/tf2_msgs_overlay/package.xml" "$ROOT/scripts/tf2_msgs_overlay/CMakeLists.txt" "$VENDOR/tf2_msgs/"
        cp "$ROOT/scripts/tf2_msgs_overlay/TFMessage.msg" "$VENDOR/tf2_msgs/msg/"
    fi
fi

# --- 4. colcon build ----------------------------------------------------------------------------
# With --symlink-install, edits to Python sources need no rebuild; only what colcon installs does.
mapfile -t build_inputs < <(cd "$ROOT" && git ls-files --cached --others --exclude-standard -- '*/package.xml' '*/setup.py' '*/setup.cfg' \
    '*/CMakeLists.txt' '*/msg/*.msg' '*/resource/*' '*/launch/*' '*/config/*' '*/rviz/*' \
    'scripts/tf2_msgs_overlay/*' 2>/dev/null | sed "s#^#$ROOT/#")
build_hash="$(hash_of "$LOCK" "${build_inputs[@]}")-${#base_paths[@]}"
if [ "$(cat "$STAMPS/build" 2>/dev/null)" != "$build_hash" ] || [ ! -f "$ROOT/install/setup.bash" ]; then
    say "building the workspace with colcon"
    (
        cd "$ROOT"
        export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
        export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
        export PYTHONWARNINGS="ignore:setup.py install is deprecated"
        colcon --log-level error build --symlink-install --base-paths "${base_paths[@]}" \
            --event-handlers console_cohesion- status- summary+ \
            --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VENV/bin/python" \
            >"$STAMPS/colcon.log" 2>&1 || { cat "$STAMPS/colcon.log" >&2; exit 1; }
        tail -n 3 "$STAMPS/colcon.log"
    )
    echo "$build_hash" >"$STAMPS/build"
fi
# --- 5. native CPU kernels ----------------------------------------------------------------------
# Compiled once per machine into ~/.cache/velobins (~15 s) so the first training run does not pay
# for it; without a C++ compiler training falls back to PyTorch's kernel and this says why.
(
    set +u
    # shellcheck disable=SC1091
    source "$ROOT/scripts/env.sh" >/dev/null
    python -m velobins_net.accel.native 2>&1 | tail -n 1 | sed 's/^/bootstrap: /'
)
say "ready: source scripts/env.sh"
