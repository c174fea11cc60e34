"""The installed odometry-out node live over DDS (mavros mode: nav_msgs/Odometry in and out), its px4
mode without px4_msgs (one fatal line, non-zero exit), and how it fills a VehicleOdometry (a stand-in
with px4_msgs' fields and constants, since px4_msgs is not installable here)."""

from __future__ import annotations

import math
import signal
import subprocess
import time

import pytest

from velobins_bridges.odom_out import Odometry, OdomOutConfig, to_px4

PX4_FIELDS = {
    "timestamp": 0,
    "timestamp_sample": 0,
    "pose_frame": 0,
    "position": [0.0] * 3,
    "q": [0.0] * 4,
    "velocity_frame": 0,
    "velocity": [0.0] * 3,
    "angular_velocity": [0.0] * 3,
    "position_variance": [0.0] * 3,
    "orientation_variance": [0.0] * 3,
    "velocity_variance": [0.0] * 3,
    "reset_counter": 0,
    "quality": 0,
}


class VehicleOdometry:
    """px4_msgs/msg/VehicleOdometry's fields and frame constants (PX4 msg/versioned/VehicleOdometry.msg)."""

    POSE_FRAME_UNKNOWN, POSE_FRAME_NED, POSE_FRAME_FRD = 0, 1, 2
    VELOCITY_FRAME_UNKNOWN, VELOCITY_FRAME_NED, VELOCITY_FRAME_FRD, VELOCITY_FRAME_BODY_FRD = 0, 1, 2, 3

    def __init__(self) -> None:
        for name, value in PX4_FIELDS.items():
            setattr(self, name, list(value) if isinstance(value, list) else value)


def test_fill_px4_copies_every_field() -> None:
    pytest.importorskip("rclpy")
    from velobins_bridges.odom_out_node import check_px4_type, fill_px4

    check_px4_type(VehicleOdometry, "px4_msgs/msg/VehicleOdometry")
    s = math.sqrt(0.5)
    odom = Odometry(1.5, (1.0, 2.0, 3.0), (0.0, 0.0, s, s), (1.0, 0.0, 0.0), (0.0, 0.0, 0.1), (0.0,) * 36, (0.0,) * 36)
    plain = to_px4(odom, OdomOutConfig(pose_frame="ned"), now=2.0)
    msg = fill_px4(VehicleOdometry(), plain)
    assert msg.position == [2.0, 1.0, -3.0] and msg.timestamp_sample == 1_500_000 and msg.timestamp == 2_000_000
    assert msg.q == pytest.approx([1.0, 0.0, 0.0, 0.0]) and msg.pose_frame == VehicleOdometry.POSE_FRAME_NED
    assert msg.velocity_frame == VehicleOdometry.VELOCITY_FRAME_BODY_FRD and msg.angular_velocity == [0.0, 0.0, -0.1]

    class Renumbered(VehicleOdometry):
        POSE_FRAME_FRD = 7

    with pytest.raises(ValueError, match="POSE_FRAME_FRD is 7, expected 2"):
        check_px4_type(Renumbered, "px4_msgs/msg/VehicleOdometry")

    class Older:
        timestamp = 0

    with pytest.raises(ValueError, match="has no field 'timestamp_sample'"):
        check_px4_type(Older, "px4_msgs/msg/VehicleOdometry")


def _command(*ros_args: str) -> list[str]:
    from velobins_ros import executable

    return [str(executable("velobins_bridges", "velobins_odom_out")), "--ros-args", *ros_args]


@pytest.mark.ros
def test_mavros_mode_live(ros_domain: int) -> None:
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry as OdometryMsg
    from rclpy.node import Node

    from velobins_ros import RELIABLE_QOS

    cmd = _command("-r", "__ns:=/drone1", "-p", "mode:=mavros", "-p", "diagnostics_period:=0.1")
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    received: list[OdometryMsg] = []
    diag: dict[str, str] = {}

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("/drone1/velobins_odom_out"):
                diag.update({kv.key: kv.value for kv in status.values})

    rclpy.init()
    try:
        node = Node("odom_out_test")
        node.create_subscription(OdometryMsg, "/drone1/mavros/odometry/out", received.append, RELIABLE_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, RELIABLE_QOS)
        pub = node.create_publisher(OdometryMsg, "/drone1/velobins/odometry", RELIABLE_QOS)
        msg = OdometryMsg()
        msg.header.frame_id, msg.child_frame_id = "drone1/odom", "drone1/base_link"
        msg.header.stamp.sec = 1234
        msg.pose.pose.position.x, msg.pose.pose.position.y, msg.pose.pose.position.z = 1.0, 2.0, 3.0
        msg.pose.pose.orientation.z = msg.pose.pose.orientation.w = math.sqrt(0.5)
        msg.twist.twist.linear.x = 0.7
        msg.pose.covariance[0] = 0.25
        bad = OdometryMsg()
        bad.header.stamp.sec = 1235
        bad.pose.pose.orientation.w = float("nan")
        deadline = time.monotonic() + 40.0
        while not received and time.monotonic() < deadline and child.poll() is None:
            pub.publish(msg)
            rclpy.spin_once(node, timeout_sec=0.1)
        pub.publish(bad)
        deadline = time.monotonic() + 30.0  # until the node says it counted the bad message
        while diag.get("dropped non_finite") != "1" and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        node.destroy_node()
    finally:
        rclpy.shutdown()
        child.send_signal(signal.SIGINT)
        log = child.communicate(timeout=20)[0]
    assert child.returncode == 0, log
    assert received, log
    out = received[0]
    assert (out.header.frame_id, out.child_frame_id) == ("odom", "base_link")  # mavros' frame names
    assert out.header.stamp.sec == 1234 and out.pose.pose.position.y == 2.0 and out.twist.twist.linear.x == 0.7
    assert out.pose.pose.orientation.z == pytest.approx(math.sqrt(0.5)) and out.pose.covariance[0] == 0.25
    assert "dropped in total: {'non_finite': 1}" in log, log


@pytest.mark.ros
def test_px4_mode_without_px4_msgs_exits_with_one_line(ros_domain: int) -> None:
    import importlib.util

    if importlib.util.find_spec("px4_msgs") is not None:
        pytest.skip("px4_msgs is installed here")
    proc = subprocess.run(_command("-p", "mode:=px4"), capture_output=True, text=True, timeout=60)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, out
    lines = out.splitlines()
    assert len(lines) == 1 and "cannot start" in lines[0] and "'px4_msgs'" in lines[0], out
