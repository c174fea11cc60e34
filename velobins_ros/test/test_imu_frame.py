"""velobins_ros.imu_frame.ImuFrame live: rotations from a latched /tf_static, the parameter, and the identity cases.

One process, two rclpy nodes: the one under test holds the ImuFrame, a second one publishes the
static transforms as robot_state_publisher / static_transform_publisher would (transient local).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_common.frames import FRD_TO_FLU

ACC = (0.3, -1.2, 9.7)
GYRO = (0.05, 0.4, -0.2)


@pytest.fixture
def ros(ros_domain: int) -> Iterator[dict[str, Any]]:
    """rclpy up on a private domain, the node under test, a TF publisher node, and an executor for both."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    rclpy.init()
    nodes = {"node": Node("imu_frame_test"), "tf": Node("imu_frame_test_tf")}
    executor = SingleThreadedExecutor()
    for n in nodes.values():
        executor.add_node(n)
    try:
        yield {**nodes, "executor": executor}
    finally:
        executor.shutdown()
        for n in nodes.values():
            n.destroy_node()
        rclpy.shutdown()


def spin_until(executor: Any, done: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        executor.spin_once(timeout_sec=0.05)
    return done()


def imu(frame_id: str, acc: tuple = ACC, gyro: tuple = GYRO) -> Any:
    from sensor_msgs.msg import Imu

    msg = Imu()
    msg.header.frame_id = frame_id
    msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = acc
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = gyro
    return msg


def static_publisher(node: Any) -> Callable[..., None]:
    """A latched /tf_static publisher; returns ``publish((parent, child, quat), ...)``."""
    from geometry_msgs.msg import TransformStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from tf2_msgs.msg import TFMessage

    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    pub = node.create_publisher(TFMessage, "/tf_static", qos)

    def publish(*edges: tuple[str, str, tuple[float, ...]]) -> None:
        msg = TFMessage()
        for parent, child, q in edges:
            t = TransformStamped()
            t.header.frame_id, t.child_frame_id = parent, child
            t.transform.translation.x = 0.03  # a lever arm: stored, not applied
            r = t.transform.rotation
            r.x, r.y, r.z, r.w = (float(v) for v in q)
            msg.transforms.append(t)
        pub.publish(msg)

    return publish


def make_frame(node: Any, imu_to_body: tuple[float, ...] = (), timeout: float = 5.0) -> Any:
    from velobins_ros import DropCounter
    from velobins_ros.imu_frame import ImuFrame

    drops = DropCounter(node)
    return ImuFrame(node, "base_link", imu_to_body, drops, timeout=timeout), drops


@pytest.mark.ros
def test_rotation_from_tf_static_chain(ros: dict[str, Any], capfd: pytest.CaptureFixture[str]) -> None:
    """Drops (counted, with the fix in the log) until base_link ← mount ← imu_link is known, then rotates."""
    r_bm, r_mi = Rotation.random(random_state=11), Rotation.random(random_state=12)
    publish = static_publisher(ros["tf"])
    publish(("base_link", "mount", tuple(r_bm.as_quat())))  # before the subscriber exists: latched
    frame, drops = make_frame(ros["node"], timeout=0.3)
    assert frame.subscription is not None
    assert spin_until(ros["executor"], lambda: "mount" in frame._tree)

    assert frame.to_body(imu("imu_link")) is None
    assert drops.counts["imu_frame_unknown"] == 1
    time.sleep(0.4)  # past the timeout: a (throttled) ERROR says how to fix it
    assert frame.to_body(imu("imu_link")) is None
    assert drops.counts["imu_frame_unknown"] == 2
    err = capfd.readouterr().err
    assert "imu_frame_unknown" in err and "static_transform_publisher" in err and "imu_to_body" in err
    assert "[ERROR]" in err and "IMU frame still unknown" in err

    publish(("mount", "imu_link", tuple(r_mi.as_quat())))
    out: list = []
    assert spin_until(ros["executor"], lambda: out.append(frame.to_body(imu("imu_link"))) or out[-1] is not None)
    acc, gyro = out[-1]
    r = r_bm.as_matrix() @ r_mi.as_matrix()
    np.testing.assert_allclose(acc, r @ ACC, atol=1e-9)
    np.testing.assert_allclose(gyro, r @ GYRO, atol=1e-9)
    np.testing.assert_allclose(frame.rotation("imu_link"), r, atol=1e-12)
    assert "IMU frame 'imu_link' -> 'base_link' from /tf_static" in capfd.readouterr().err


@pytest.mark.ros
def test_frd_imu_from_tf_static(ros: dict[str, Any]) -> None:
    """A PX4-style FRD IMU with base_link → imu_frd on /tf_static: (x, y, z) → (x, −y, −z)."""
    publish = static_publisher(ros["tf"])
    publish(("base_link", "imu_frd", FRD_TO_FLU))
    frame, _ = make_frame(ros["node"])
    out: list = []
    assert spin_until(ros["executor"], lambda: out.append(frame.to_body(imu("imu_frd"))) or out[-1] is not None)
    acc, gyro = out[-1]
    np.testing.assert_allclose(acc, (ACC[0], -ACC[1], -ACC[2]))
    np.testing.assert_allclose(gyro, (GYRO[0], -GYRO[1], -GYRO[2]))
    assert frame.to_body(imu("/imu_frd")) is not None  # a ROS 1 style leading slash is the same frame


@pytest.mark.ros
def test_parameter_overrides_frame_id_and_tf(ros: dict[str, Any], capfd: pytest.CaptureFixture[str]) -> None:
    """imu_to_body set: applied to every message whatever its frame_id; /tf_static is not even read."""
    rot = Rotation.random(random_state=5)
    frame, drops = make_frame(ros["node"], tuple(rot.as_matrix().reshape(-1)))
    assert frame.subscription is None
    for frame_id in ("imu_link", "", "base_link"):
        acc, gyro = frame.to_body(imu(frame_id))
        np.testing.assert_allclose(acc, rot.as_matrix() @ ACC, atol=1e-12)
        np.testing.assert_allclose(gyro, rot.as_matrix() @ GYRO, atol=1e-12)
    assert not drops.counts
    err = capfd.readouterr().err
    assert err.count("imu_to_body parameter") == 3  # once per frame id seen, not per message
    frame.to_body(imu("imu_link"))
    assert "imu_to_body parameter" not in capfd.readouterr().err

    frd, _ = make_frame(ros["node"], FRD_TO_FLU)
    np.testing.assert_allclose(frd.to_body(imu("imu"))[0], (ACC[0], -ACC[1], -ACC[2]))


@pytest.mark.ros
def test_identity_cases(ros: dict[str, Any], capfd: pytest.CaptureFixture[str]) -> None:
    """frame_id == base_frame: as is, silently. Empty frame_id: as is, with one WARN. Identity parameter: as is."""
    frame, drops = make_frame(ros["node"])
    for frame_id in ("base_link", "/base_link"):
        acc, gyro = frame.to_body(imu(frame_id))
        assert tuple(acc) == ACC and tuple(gyro) == GYRO
    assert "empty header.frame_id" not in capfd.readouterr().err
    for _ in range(3):
        acc, gyro = frame.to_body(imu(""))
        assert tuple(acc) == ACC and tuple(gyro) == GYRO
    assert capfd.readouterr().err.count("empty header.frame_id") == 1
    assert not drops.counts

    ident, _ = make_frame(ros["node"], (0.0, 0.0, 0.0, 1.0))
    acc, _ = ident.to_body(imu("imu_link"))
    assert tuple(acc) == ACC


@pytest.mark.ros
def test_invalid_parameter_is_an_error_at_start(ros: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"^imu_to_body: .*reflection"):
        make_frame(ros["node"], (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0))
    with pytest.raises(ValueError, match=r"^imu_to_body: expected 4 numbers"):
        make_frame(ros["node"], (1.0, 0.0))


@pytest.mark.ros
def test_unprefixed_body_frame_is_the_vehicles_own(ros: dict[str, Any], capfd: pytest.CaptureFixture[str]) -> None:
    """frame_prefix drone2/: an IMU stamped base_link (mavros' default) is drone2/base_link, said once at INFO;
    another vehicle's body frame is not, and without a prefix nothing changes."""
    from velobins_ros import DropCounter
    from velobins_ros.imu_frame import ImuFrame

    drops = DropCounter(ros["node"])
    frame = ImuFrame(ros["node"], "drone2/base_link", (), drops, frame_prefix="drone2/")
    for frame_id in ("base_link", "/base_link", "drone2/base_link"):
        acc, gyro = frame.to_body(imu(frame_id))
        assert tuple(acc) == ACC and tuple(gyro) == GYRO, frame_id
    np.testing.assert_array_equal(frame.rotation("base_link"), np.eye(3))
    assert not drops.counts
    err = capfd.readouterr().err
    assert err.count("IMU frame 'base_link' taken as this vehicle's body frame 'drone2/base_link'") == 1, err
    assert "[INFO]" in err and "[WARN]" not in err

    assert frame.to_body(imu("drone1/base_link")) is None  # another vehicle's: a TF question, counted
    assert drops.counts["imu_frame_unknown"] == 1

    plain, plain_drops = make_frame(ros["node"])  # no prefix: base_link is the body, drone2/base_link is not
    assert plain.to_body(imu("drone2/base_link")) is None and plain_drops.counts["imu_frame_unknown"] == 1
