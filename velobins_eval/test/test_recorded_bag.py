"""A flight recorded from the live graph reads back as the flight that was published (issue 26 acceptance).

The test publishes a simulated flight on the graph's input topics under ``/drone1`` over DDS
(``imu``, ``rotor_speeds``, ``ground_truth/odometry``, as the bridges and a mocap bridge publish
them) and records the topics the shipped recipe ``config/recipes/record_flight.sh`` names, the way
``ros2 bag record`` does: the serialized messages as they arrive, with their arrival time as the
log time, into mcap, no VeloBins metadata (rosbag2 is not installable here, so the recorder is a
generic serialized subscription writing with rosbags). Then ``velobins convert --dataset rosbag``
turns the recording into a flight bag, whose arrays must equal the published ones.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

NS = "/drone1"
STAMP0 = 1000.0
RECIPE = Path(__file__).resolve().parents[2] / "velobins_bringup" / "config" / "recipes" / "record_flight.sh"
TYPES = {
    "imu": "sensor_msgs/msg/Imu",
    "rotor_speeds": "velobins_msgs/msg/RotorSpeeds",
    "ground_truth/odometry": "nav_msgs/msg/Odometry",
}


def recipe_topics(namespace: str) -> list[str]:
    """The topics record_flight.sh records for ``namespace`` (its "$ns/..." arguments and absolute ones)."""
    text = RECIPE.read_text()
    command = text[text.index("ros2 bag record") :]
    relative = re.findall(r'"\$ns/([\w/]+)"', command)
    absolute = re.findall(r"^\s+(/[\w/]+)", command, flags=re.M)
    return [f"{namespace}/{t}" for t in relative] + absolute


def messages(flight: Any) -> dict[str, list[Any]]:
    """The flight as the graph's input messages, per relative topic (stamps STAMP0 + t)."""
    from nav_msgs.msg import Odometry
    from scipy.spatial.transform import Rotation
    from sensor_msgs.msg import Imu

    from velobins_msgs.msg import RotorSpeeds

    out: dict[str, list[Any]] = {name: [] for name in TYPES}
    v_body = Rotation.from_quat(flight.q).inv().apply(flight.v)
    for i, t in enumerate(STAMP0 + flight.t):
        ns = round(t * 1e9)
        sec, nanosec = divmod(ns, 1_000_000_000)
        imu = Imu()
        imu.header.stamp.sec, imu.header.stamp.nanosec, imu.header.frame_id = sec, nanosec, "drone1/base_link"
        imu.orientation_covariance[0] = -1.0
        imu.linear_acceleration.x, imu.linear_acceleration.y, imu.linear_acceleration.z = map(float, flight.acc[i])
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = map(float, flight.gyro[i])
        rotor = RotorSpeeds()
        rotor.header = imu.header
        rotor.kind = RotorSpeeds.KIND_NORMALIZED
        rotor.speeds = [float(x) for x in flight.rotor[i]]
        gt = Odometry()
        gt.header.stamp = imu.header.stamp
        gt.header.frame_id, gt.child_frame_id = "world", "drone1"
        pose, twist = gt.pose.pose, gt.twist.twist
        pose.position.x, pose.position.y, pose.position.z = map(float, flight.p[i])
        pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = map(float, flight.q[i])
        twist.linear.x, twist.linear.y, twist.linear.z = map(float, v_body[i])
        out["imu"].append(imu)
        out["rotor_speeds"].append(rotor)
        out["ground_truth/odometry"].append(gt)
    return out


def publish_and_record(flight: Any, bag: Path, domain: int) -> int:
    """Publish ``flight`` and record the recipe's topics into ``bag``; returns the messages recorded."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from rosbags.rosbag2 import StoragePlugin, Writer

    from velobins_data.bag import typestore

    msgs = messages(flight)
    n = len(flight)
    qos = QoSProfile(depth=n + 10, reliability=ReliabilityPolicy.RELIABLE)  # nothing lost, whatever the pace
    ctx = Context()
    rclpy.init(context=ctx, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
    received: list[tuple[str, int, bytes]] = []
    recorded = [t for t in recipe_topics(NS) if t.removeprefix(NS + "/") in TYPES]
    executor = SingleThreadedExecutor(context=ctx)
    try:
        recorder = rclpy.create_node("recorder", context=ctx)
        executor.add_node(recorder)
        publisher = rclpy.create_node("vehicle", namespace=NS, context=ctx)
        for topic in recorded:
            msg_type = type(msgs[topic.removeprefix(NS + "/")][0])  # what a generic recorder looks up by name

            def keep(raw: bytes, topic: str = topic) -> None:
                received.append((topic, recorder.get_clock().now().nanoseconds, raw))

            recorder.create_subscription(msg_type, topic, keep, qos, raw=True)
        pubs = {name: publisher.create_publisher(type(msgs[name][0]), name, qos) for name in TYPES}
        deadline = time.monotonic() + 30.0
        while any(p.get_subscription_count() < 1 for p in pubs.values()):
            assert time.monotonic() < deadline, "the recorder never matched the publishers"
            executor.spin_once(timeout_sec=0.05)
        for i in range(n):
            for name in TYPES:
                pubs[name].publish(msgs[name][i])
            if i % 50 == 0:
                executor.spin_once(timeout_sec=0.0)
        deadline = time.monotonic() + 60.0
        while len(received) < n * len(TYPES):
            assert time.monotonic() < deadline, f"recorded {len(received)} of {n * len(TYPES)} messages"
            executor.spin_once(timeout_sec=0.05)
    finally:
        executor.shutdown()
        rclpy.shutdown(context=ctx)
    store = typestore()
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, TYPES[t.removeprefix(NS + "/")], typestore=store) for t in recorded}
        for topic, log_ns, raw in received:
            writer.write(conns[topic], log_ns, raw)
    return len(received)


def test_the_recipe_records_what_the_reader_needs() -> None:
    topics = recipe_topics(NS)
    assert {f"{NS}/{name}" for name in TYPES} <= set(topics), topics
    assert "/tf_static" in topics


@pytest.mark.ros
def test_recorded_flight_converts_back_to_the_published_arrays(tmp_path: Path, ros_domain: int) -> None:
    from velobins_data.bag import read_bag
    from velobins_data.datasets.rosbag import load_rosbag
    from velobins_data.sim import simulate_flight

    flight = simulate_flight("nano", "circle", 4.0, seed=5)
    recorded = tmp_path / "hover_01"
    assert publish_and_record(flight, recorded, ros_domain) == 3 * len(flight)
    out = tmp_path / "flight_bag"
    conv = subprocess.run(
        [sys.executable, "-m", "velobins_eval.cli", "convert", "--dataset", "rosbag", "--input", str(recorded),
         "--output", str(out)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert conv.returncode == 0, conv.stderr
    for back in (load_rosbag(recorded), read_bag(out)):
        np.testing.assert_allclose(back.t, STAMP0 + flight.t, rtol=0, atol=1e-9)  # ns stamps
        for name in ("acc", "gyro", "rotor", "p"):
            np.testing.assert_array_equal(getattr(back, name), getattr(flight, name), err_msg=name)
        np.testing.assert_allclose(np.abs(np.sum(back.q * flight.q, axis=1)), 1.0, atol=1e-12)  # q or -q
        np.testing.assert_allclose(back.v, flight.v, atol=1e-12)  # through the body-frame twist
        assert back.rotor_kind == "command" and back.name == "hover_01"
