"""A healthy start of drone.launch.py, for real: a second vehicle's frames, a quiet log, the time to odometry.

The autopilot side (:class:`launch_harness.Vehicle`) already streams a simulated Crazyflie-like
flight under ``/drone1`` (IMU at 100 Hz stamped ``base_link``, as mavros does on every vehicle;
PWM rotor speeds) when ``drone.launch.py model:=crazyflie namespace:=/drone1`` starts; the launch
is stopped with Ctrl-C once the EKF reports OK. One launch (a module fixture) serves the tests,
which check what issue 23 found wrong on such a start:

* the frames come from the namespace without ``frame_prefix:=`` (``drone1/odom``,
  ``drone1/base_link``), and the ``base_link`` IMU is taken as the vehicle's own (odometry flows);
* the launch itself prints no WARN, no ERROR and no deprecation warning, and Ctrl-C ends every node
  in time (no SIGTERM escalation);
* the nodes print no WARN before the EKF is OK (their start-up grace logs the waiting states, and the EKF its
  start-up drops such as a first velocity older than the filter's start, at INFO; still counted);
* the time from starting the launch to the first odometry message is printed (``pytest -s``); the
  only bound asserted is the generous timeout, since the number depends on the machine's load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import launch_harness as lh
import pytest
from vehicle_probe import Vehicle

pytestmark = [pytest.mark.ros, pytest.mark.skipif(lh.launch_vendor() is None, reason=lh.skip_reason())]

LAUNCH_TIMEOUT = 180.0
"""Longest wait for the first odometry or the launch's end [s]: minutes, on a loaded 2-core machine."""
NODE_LINE = re.compile(r"\[velobins_\w+-\d+\] ")
"""Lines the nodes print (launch prefixes them with the process name); the others are launch's own."""


@dataclass
class Start:
    run: lh.LaunchRun
    odometry: list[tuple[float, str, str]]
    tracking: int
    """Index of the output line where the EKF first reports OK (the end of the start)."""
    status: int


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Start:
    import random

    from velobins_data.sim import simulate_flight

    # A module fixture cannot use the function-scoped ros_domain; the same isolation, by hand.
    mp = pytest.MonkeyPatch()
    mp.setenv("ROS_DOMAIN_ID", str(domain := random.SystemRandom().randint(1, 100)))
    mp.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    vehicle = Vehicle(domain, simulate_flight("nano", "helix", 10.0, 7), namespace="/drone1", imu_frame="base_link")
    run = None
    try:
        run = lh.LaunchRun(
            "drone.launch.py", {"model": "crazyflie", "namespace": "/drone1"}, tmp_path_factory.mktemp("start")
        )
        first = vehicle.wait_for_odometry(LAUNCH_TIMEOUT)
        tracking, _ = run.wait_for(r"\[drone1\.velobins_ekf\]: health OK", LAUNCH_TIMEOUT)
        marks = {
            "nodes started": "process started with pid",
            "EKF ready": "EKF ready",
            "network ready": r"_net\]: model ",
        }
        steps = ", ".join(f"{k} {run.arrivals[run.wait_for(v)[0]] - run.started:.2f} s" for k, v in marks.items())
        print(f"\nlaunch to first odometry: {first - run.started:.2f} s ({steps})")
        run.interrupt()
        status = run.wait(LAUNCH_TIMEOUT)
    finally:
        vehicle.close()
        if run is not None:
            run.close()
        mp.undo()
    return Start(run, list(vehicle.odometry), tracking, status)


def test_frames_default_from_the_namespace(start: Start) -> None:
    _, frame_id, child = start.odometry[0]
    assert (frame_id, child) == ("drone1/odom", "drone1/base_link")
    out = start.run.output
    for node in ("velobins_net", "velobins_ekf"):
        assert f"[drone1.{node}]: IMU frame 'base_link' taken as this vehicle's body frame 'drone1/base_link'" in out
    assert "imu_frame_unknown" not in out


def test_the_launch_prints_no_warning_and_ends_cleanly(start: Start) -> None:
    lines = start.run.lines
    launch_lines = [line for line in lines[: start.tracking + 1] if not NODE_LINE.match(line)]
    loud = [line for line in launch_lines if re.search(r"\[(WARN|WARNING|ERROR)\]|Warning|deprecated", line)]
    assert not loud, start.run.output
    assert start.status == 0, start.run.output
    assert not [line for line in lines if "[ERROR]" in line], start.run.output  # Ctrl-C: every node ends in time
    assert not [pid for pid in start.run.all_pids() if lh.alive(pid)], start.run.output


def test_the_nodes_print_no_warn_before_the_ekf_is_ok(start: Start) -> None:
    warns = [line for line in start.run.lines[: start.tracking + 1] if NODE_LINE.match(line) and "[WARN]" in line]
    assert not warns, "\n".join(warns)
