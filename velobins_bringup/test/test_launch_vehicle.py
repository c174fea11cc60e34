"""drone.launch.py with a platform, for real: the autopilot's IMU through the IMU bridge, odometry out to mavros.

``platform:=ardupilot`` with ``rotor_bridge:=none`` (mavros_msgs, which its ESC telemetry preset needs, is
not installed here: the vehicle publishes rotor speeds itself) starts the IMU bridge on
``mavros/imu/data_raw`` and odometry out in mavros mode; ``odometry_topic:=odometry/filtered`` renames
the EKF's output, and odometry out must follow it. The autopilot side (:class:`launch_harness.Vehicle`)
streams a simulated flight where mavros would; the test waits for odometry on ``mavros/odometry/out``,
in mavros' frames, then stops the launch with Ctrl-C.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import launch_harness as lh
import pytest
from vehicle_probe import Vehicle

pytestmark = [pytest.mark.ros, pytest.mark.skipif(lh.launch_vendor() is None, reason=lh.skip_reason())]

LAUNCH_TIMEOUT = 180.0
"""Longest wait for odometry out or the launch's end [s]: minutes, on a loaded 2-core machine."""


def test_platform_launch_bridges_in_and_odometry_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nav_msgs.msg import Odometry

    from velobins_data.sim import simulate_flight

    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain := random.SystemRandom().randint(1, 100)))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    flight = simulate_flight("nano", "helix", 10.0, 7)
    vehicle = Vehicle(domain, flight, namespace="/drone1", imu_frame="base_link", imu_topic="mavros/imu/data_raw")
    out: list[tuple[str, str]] = []
    sub = vehicle.node.create_subscription(
        Odometry, "mavros/odometry/out", lambda m: out.append((m.header.frame_id, m.child_frame_id)), 10
    )
    args = {
        "model": "crazyflie",
        "namespace": "/drone1",
        "platform": "ardupilot",
        "rotor_bridge": "none",
        "odometry_topic": "odometry/filtered",
    }
    run = lh.LaunchRun("drone.launch.py", args, tmp_path)
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while not out:
            assert time.monotonic() < deadline and run.proc.poll() is None, f"no odometry out:\n{run.output}"
            time.sleep(0.05)
        run.interrupt()
        status = run.wait(LAUNCH_TIMEOUT)
    finally:
        vehicle.node.destroy_subscription(sub)
        vehicle.close()
        run.close()
    assert out[0] == ("odom", "base_link"), out[0]  # mavros' frame names (odom_out frame_id / child_frame_id)
    assert status == 0, run.output
    text = run.output
    assert "velobins_imu_bridge" in text and "/drone1/mavros/imu/data_raw" in text, text
    assert (
        "odometry /drone1/odometry/filtered -> nav_msgs/Odometry (odom -> base_link) on /drone1/mavros/odometry/out"
        in text
    )
    assert not [pid for pid in run.all_pids() if lh.alive(pid)], text
