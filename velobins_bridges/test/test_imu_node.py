"""The installed IMU bridge node, live over DDS: a Crazyswarm2-style stream in g and deg/s in, SI Imu out.

crazyflie_interfaces is not installable here, so the node runs the shipped ``crazyflie`` preset
with one override: the input type is ``sensor_msgs/JointState``, whose header and float array
(``position``) stand in for ``LogDataGeneric``'s header and ``values``. Everything else (field
indices, units, axes, stamps, the ``/**/`` key and relative topics under a namespace, the frame
prefix) is the preset's. A second test starts the presets whose message packages are missing and
expects one fatal line and a non-zero exit.
"""

from __future__ import annotations

import math
import signal
import subprocess
import time
from pathlib import Path

import pytest

from velobins_common.constants import STANDARD_GRAVITY

G = STANDARD_GRAVITY
VALUES = [0.1, -0.2, 1.0, 90.0, -45.0, 180.0]  # acc.x/y/z [g], gyro.x/y/z [deg/s]
ACC = (0.1 * G, -0.2 * G, G)
GYRO = (math.pi / 2, -math.pi / 4, math.pi)


def preset(name: str) -> Path:
    from ament_index_python.packages import get_package_share_directory

    path = Path(get_package_share_directory("velobins_bringup")) / "config" / "imu_bridge" / f"{name}.yaml"
    assert path.is_file(), f"{path}: preset not installed (velobins_bringup/setup.py data_files)"
    return path


def bridge_command(name: str, *ros_args: str) -> list[str]:
    from velobins_ros import executable

    exe = executable("velobins_bridges", "velobins_imu_bridge")
    return [str(exe), "--ros-args", "--params-file", str(preset(name)), *ros_args]


@pytest.mark.ros
def test_crazyswarm_style_stream_to_si_imu_live(ros_domain: int) -> None:
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.node import Node
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Imu, JointState

    from velobins_ros import sensor_qos

    overrides = ["-p", "input_type:=sensor_msgs/msg/JointState", "-p", "acc_field:=position"]
    overrides += ["-p", "gyro_field:=position", "-p", "input_topic:=cf7/imu", "-p", "frame_prefix:=drone1/"]
    overrides += ["-p", "diagnostics_period:=0.2", "-p", "input_timeout:=60.0"]  # liveness is not tested here
    cmd = bridge_command("crazyflie", "-r", "__ns:=/drone1", *overrides)
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    received: list[Imu] = []
    statuses: list = []
    sent: list[float] = []
    rclpy.init()
    try:
        node = Node("imu_bridge_test")
        node.create_subscription(Imu, "/drone1/imu", received.append, sensor_qos(500))
        node.create_subscription(
            DiagnosticArray,
            "/diagnostics",
            lambda m: statuses.extend(s for s in m.status if "velobins_imu_bridge" in s.name),
            QoSProfile(depth=50),
        )
        pub = node.create_publisher(JointState, "/drone1/cf7/imu", 10)

        def send() -> None:
            t = 1000.0 + 0.01 * len(sent)  # 100 Hz in the source's time base
            msg = JointState()
            msg.header.stamp.sec, msg.header.stamp.nanosec = int(t), round((t - int(t)) * 1e9)
            msg.position = VALUES
            pub.publish(msg)
            sent.append(t)

        deadline = time.monotonic() + 40.0
        while not received and time.monotonic() < deadline and child.poll() is None:  # discovery
            send()
            rclpy.spin_once(node, timeout_sec=0.05)
        assert received, f"no Imu from the bridge (rc={child.poll()})"
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # 1 s more of the stream, then the diagnostics are read
            send()
            rclpy.spin_once(node, timeout_sec=0.01)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        node.destroy_node()
    finally:
        rclpy.shutdown()
        child.send_signal(signal.SIGINT)
        log = child.communicate(timeout=20)[0]

    assert child.returncode == 0, log
    assert "dropped in total: nothing" in log, log
    stamps = set()
    for msg in received:
        assert msg.header.frame_id == "drone1/base_link"
        assert msg.orientation_covariance[0] == -1.0
        a, w = msg.linear_acceleration, msg.angular_velocity
        assert (a.x, a.y, a.z) == pytest.approx(ACC, rel=1e-9)
        assert (w.x, w.y, w.z) == pytest.approx(GYRO, rel=1e-9)
        stamps.add(round(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, 6))
    assert stamps <= {round(t, 6) for t in sent}, "stamps are the source's header stamps"
    last = statuses[-1]
    values = {kv.key: kv.value for kv in last.values}
    assert last.level == b"\x00", (last.message, values)
    assert float(values["mean |specific force| [m/s²]"]) == pytest.approx(
        math.hypot(*ACC), abs=1e-3
    )  # printed to 3 decimals


@pytest.mark.ros
@pytest.mark.parametrize(("name", "package"), [("crazyflie", "crazyflie_interfaces"), ("px4_vehicle_imu", "px4_msgs")])
def test_missing_message_package_exits_with_one_line(ros_domain: int, name: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    proc = subprocess.run(bridge_command(name), capture_output=True, text=True, timeout=60)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, out
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert "cannot start" in lines[0] and f"'{package}'" in lines[0] and "install" in lines[0], out
