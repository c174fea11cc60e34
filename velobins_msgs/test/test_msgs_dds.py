"""The two VeloBins messages travel between two processes over Fast DDS with their fields intact."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

PUBLISHER = Path(__file__).with_name("_publisher.py")


@pytest.mark.ros
def test_messages_cross_process(ros_domain: int) -> None:
    import rclpy
    from rclpy.node import Node

    from velobins_msgs.msg import RotorSpeeds, VelocityEstimate

    child = subprocess.Popen([sys.executable, str(PUBLISHER)])
    rclpy.init()
    received: dict[str, object] = {}
    try:
        node = Node("velobins_msgs_test_subscriber")
        node.create_subscription(RotorSpeeds, "/test/rotor_speeds", lambda m: received.setdefault("rotor", m), 10)
        node.create_subscription(VelocityEstimate, "/test/velocity", lambda m: received.setdefault("vel", m), 10)
        deadline = time.monotonic() + 30.0
        while len(received) < 2 and time.monotonic() < deadline and child.poll() is None:
            rclpy.spin_once(node, timeout_sec=0.1)
        node.destroy_node()
    finally:
        rclpy.shutdown()
        child.terminate()
        child.wait(timeout=10)

    assert set(received) == {"rotor", "vel"}, f"received only {sorted(received)} (publisher rc={child.returncode})"
    rotor, vel = received["rotor"], received["vel"]
    assert rotor.header.frame_id == "base_link"
    assert rotor.kind == RotorSpeeds.KIND_NORMALIZED
    assert list(rotor.speeds) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert rotor.header.stamp.sec > 0
    assert (vel.velocity.x, vel.velocity.y, vel.velocity.z) == (1.5, -0.25, 0.125)
    assert list(vel.covariance) == pytest.approx([0.01, 0, 0, 0, 0.02, 0, 0, 0, 0.03])
    assert list(vel.bin_centers) == [-1.0, 0.0, 1.0]
    assert list(vel.distribution) == pytest.approx([0.25, 0.5, 0.25] * 3)
