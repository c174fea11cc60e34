"""The replay node over real rclpy and Fast DDS: it holds the flight until every subscriber it was told to
wait for is matched, on each of the topics it replays (the graph's start-up race)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import graph_fixtures as gf
import pytest

from velobins_ros import executable


@pytest.fixture(scope="module")
def short_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3 s simulated flight as a rosbag2 folder."""
    from velobins_data.bag import write_bag
    from velobins_data.sim import simulate_flight

    path = tmp_path_factory.mktemp("replay") / "bag"
    write_bag(simulate_flight("nano", "circle", 3.0, 0), path)
    return path


def test_replay_waits_for_the_rotor_subscriber(ros_domain: int, short_bag: Path, tmp_path: Path) -> None:
    """With ``wait_for_rotor_subscribers: 1`` the first IMU sample leaves only after a rotor subscriber exists,
    though the IMU subscriber was matched long before: a network node whose rotor reader is discovered late
    would otherwise miss the flight's first rotor samples."""
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Imu

    from velobins_msgs.msg import RotorSpeeds

    params = {"bag": str(short_bag), "start_delay": 0.0, "wait_for_rotor_subscribers": 1}
    params |= {"wait_for_imu_subscribers": 1, "publish_clock": False}
    cmd = [str(executable("velobins_eval", "velobins_replay_node")), "--ros-args"]
    for key, value in params.items():
        cmd += ["-p", f"{key}:={value}"]
    log = tmp_path / "replay.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("replay_probe", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    imu_arrivals: list[float] = []
    rotor_arrivals: list[float] = []
    try:
        node.create_subscription(Imu, "imu", lambda _: imu_arrivals.append(time.monotonic()), qos_profile_sensor_data)
        deadline = time.monotonic() + 60.0
        while node.count_publishers("imu") < 1 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert node.count_publishers("imu") == 1, log.read_text()
        held_until = time.monotonic() + 3.0  # matched on /imu: a replay that ignored the rotor wait starts now
        while time.monotonic() < held_until:
            executor.spin_once(timeout_sec=0.1)
        assert not imu_arrivals, f"replay started before any rotor subscriber:\n{log.read_text()}"
        rotor_created = time.monotonic()
        node.create_subscription(
            RotorSpeeds, "rotor_speeds", lambda _: rotor_arrivals.append(time.monotonic()), qos_profile_sensor_data
        )
        deadline = time.monotonic() + 60.0
        while proc.poll() is None and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
        codes = gf.stop_nodes({"velobins_replay_node": proc})
    text = log.read_text()
    assert codes == {"velobins_replay_node": 0}, (codes, text)
    assert "subscribers matched on ['/imu', '/rotor_speeds']: starting" in text, text
    assert imu_arrivals and min(imu_arrivals) > rotor_created, text
    assert rotor_arrivals, text
