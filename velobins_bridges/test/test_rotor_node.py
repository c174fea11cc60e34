"""The installed rotor bridge node, live over DDS: JointState in, RotorSpeeds out.

The node runs as ``ros2 run`` would start it (the installed executable) with the shipped
joint_state preset under a namespace, so the test also covers the ``/**/`` key and the relative
topic names. A second test starts a preset whose message package is not installed (mavros) and
expects one fatal line and a non-zero exit.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from pathlib import Path

import pytest

JOINTS = ["rotor_2_joint", "gimbal_joint", "rotor_0_joint", "rotor_3_joint", "rotor_1_joint"]
VELOCITY = [-300.0, 5.0, 100.0, -400.0, 200.0]
EXPECTED = [100.0, 200.0, 300.0, 400.0]  # rotor_0 .. rotor_3, magnitudes
MAX_HOLD_AGE = 0.3


def preset(name: str) -> Path:
    from ament_index_python.packages import get_package_share_directory

    path = Path(get_package_share_directory("velobins_bringup")) / "config" / "rotor_bridge" / f"{name}.yaml"
    assert path.is_file(), f"{path}: preset not installed (velobins_bringup/setup.py data_files)"
    return path


def bridge_command(name: str, *ros_args: str) -> list[str]:
    from velobins_ros import executable

    exe = executable("velobins_bridges", "velobins_rotor_bridge")
    return [str(exe), "--ros-args", "--params-file", str(preset(name)), *ros_args]


@pytest.mark.ros
def test_joint_state_to_rotor_speeds_live_with_hold_last(ros_domain: int) -> None:
    import rclpy
    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from velobins_msgs.msg import RotorSpeeds
    from velobins_ros import sensor_qos

    cmd = bridge_command(
        "joint_state", "-r", "__ns:=/drone1", "-p", "hold_rate:=50.0", "-p", f"max_hold_age:={MAX_HOLD_AGE}"
    )
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    received: list[tuple[float, RotorSpeeds]] = []
    rclpy.init()
    try:
        node = Node("rotor_bridge_test")
        node.create_subscription(
            RotorSpeeds, "/drone1/rotor_speeds", lambda m: received.append((time.monotonic(), m)), sensor_qos(100)
        )
        pub = node.create_publisher(JointState, "/drone1/joint_states", 10)

        start = time.monotonic()

        def send() -> None:  # stamped like a sensor: 1000 s + wall time since the start
            ns = round((time.monotonic() - start) * 1e9)
            msg = JointState()
            msg.header.stamp.sec, msg.header.stamp.nanosec = 1000 + ns // 1_000_000_000, ns % 1_000_000_000
            msg.name = JOINTS
            msg.velocity = VELOCITY
            pub.publish(msg)

        deadline = time.monotonic() + 40.0
        while not received and time.monotonic() < deadline and child.poll() is None:  # discovery
            send()
            rclpy.spin_once(node, timeout_sec=0.05)
        assert received, f"no RotorSpeeds from the bridge (rc={child.poll()})"
        for _ in range(10):  # 0.5 s of 20 Hz "telemetry"
            send()
            end = time.monotonic() + 0.05
            while time.monotonic() < end:
                rclpy.spin_once(node, timeout_sec=0.01)
        last_sent = time.monotonic()
        end = last_sent + 1.5  # hold-last runs, then must stop
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.01)
        node.destroy_node()
    finally:
        rclpy.shutdown()
        child.send_signal(signal.SIGINT)
        log = child.communicate(timeout=20)[0]

    assert child.returncode == 0, log
    assert "dropped in total: nothing" in log, log
    assert "published" in log and "held" in log, log
    for _, msg in received:
        assert msg.kind == RotorSpeeds.KIND_RAD_PER_SEC
        assert msg.header.frame_id == "base_link"
        assert list(msg.speeds) == pytest.approx(EXPECTED)
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in received]
    assert all(b > a for a, b in itertools.pairwise(stamps)), "stamps must strictly increase"
    after = [t - last_sent for t, _ in received if t > last_sent + 0.01]
    assert len(after) >= 3, f"hold-last republished {len(after)} samples after the input stopped"
    assert max(after) <= MAX_HOLD_AGE + 0.25, f"held for {max(after):.3f} s, max_hold_age is {MAX_HOLD_AGE}"


@pytest.mark.ros
def test_missing_message_package_exits_with_one_line(ros_domain: int) -> None:
    import importlib.util

    if importlib.util.find_spec("mavros_msgs") is not None:
        pytest.skip("mavros_msgs is installed here")
    proc = subprocess.run(bridge_command("mavros_esc_status"), capture_output=True, text=True, timeout=60)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, out
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert "cannot start" in lines[0] and "'mavros_msgs'" in lines[0] and "mavros-msgs" in lines[0], out
