"""rosbag2 conversion: exact round trip, and messages rclpy itself can deserialise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import Reader
from scipy.spatial.transform import Rotation

from velobins_data import bag
from velobins_data.flight import Flight

FIELDS = ("t", "acc", "gyro", "rotor", "p", "q", "v")


def make_flight(n: int = 400, t0: float = 0.0, kind: str = "command", rotors: int = 4) -> Flight:
    rng = np.random.default_rng(7)
    t = t0 + np.arange(n) * 0.01
    q = Rotation.from_euler("xyz", np.c_[0.1 * np.sin(t), 0.05 * np.cos(t), 0.4 * t]).as_quat()
    rotor = rng.uniform(0.2, 0.8, (n, rotors)) if kind == "command" else rng.uniform(1500, 2500, (n, rotors))
    return Flight(
        name="unit_flight",
        t=t,
        acc=rng.normal(0, 1, (n, 3)) + np.array([0.0, 0.0, 9.81]),
        gyro=rng.normal(0, 0.3, (n, 3)),
        rotor=rotor,
        rotor_kind=kind,
        p=np.cumsum(rng.normal(0, 0.01, (n, 3)), axis=0),
        q=q,
        v=rng.normal(0, 1, (n, 3)),
        metadata={"platform": "unit", "gravity": 9.81, "dataset": "synthetic"},
    )


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize(("t0", "kind", "rotors"), [(0.0, "command", 4), (1.7e9, "speed", 6)])
def test_round_trip(tmp_path: Path, storage: str, t0: float, kind: str, rotors: int) -> None:
    flight = make_flight(t0=t0, kind=kind, rotors=rotors)
    info = bag.write_bag(flight, tmp_path / "flight", storage=storage)
    assert info.messages == 3 * len(flight)
    assert info.stamp_offset == (bag.STAMP_OFFSET if t0 < bag.MIN_STAMP else 0.0)
    back = bag.read_bag(tmp_path / "flight")
    assert back.name == flight.name and back.rotor_kind == kind and back.num_rotors == rotors
    assert back.metadata["platform"] == "unit" and back.gravity == pytest.approx(9.81)
    for name in FIELDS:
        tol = 2e-9 if name == "t" else 1e-12  # stamps are stored in integer nanoseconds
        np.testing.assert_allclose(
            getattr(back, name), getattr(flight, name), atol=tol * max(1.0, abs(t0)), err_msg=name
        )


def test_a_bag_written_before_the_rotor_kind_rename_is_read(tmp_path: Path) -> None:
    import json

    import yaml

    flight = make_flight(n=60, kind="speed")
    bag.write_bag(flight, tmp_path / "b")
    meta_file = tmp_path / "b" / "metadata.yaml"
    info = yaml.safe_load(meta_file.read_text())
    custom = info["rosbag2_bagfile_information"]["custom_data"]
    meta = json.loads(custom["velobins.sequence"])
    assert meta["format_version"] == bag.BAG_FORMAT_VERSION == 2 and meta["rotor_kind"] == "speed"
    # the custom metadata of a bag written before issue 22: no version, the old name
    meta.pop("format_version")
    custom["velobins.sequence"] = json.dumps(meta | {"rotor_kind": "rpm"})
    meta_file.write_text(yaml.safe_dump(info))
    back = bag.read_bag(tmp_path / "b")
    assert back.rotor_kind == "speed" and np.allclose(back.rotor, flight.rotor)
    custom["velobins.sequence"] = json.dumps(meta | {"format_version": 7})
    meta_file.write_text(yaml.safe_dump(info))
    with pytest.raises(bag.BagError, match="format_version 7"):
        bag.read_bag(tmp_path / "b")


def test_existing_output_and_missing_topic(tmp_path: Path) -> None:
    flight = make_flight(n=50)
    bag.write_bag(flight, tmp_path / "b")
    with pytest.raises(FileExistsError):
        bag.write_bag(flight, tmp_path / "b")
    # A bag with only /imu is not a flight: the error names the missing topics.
    from rosbags.rosbag2 import Writer

    store = bag.typestore()
    with Reader(tmp_path / "b") as reader, Writer(tmp_path / "imu_only", version=9) as writer:
        conn_in = next(c for c in reader.connections if c.topic == bag.TOPIC_IMU)
        conn_out = writer.add_connection(bag.TOPIC_IMU, conn_in.msgtype, typestore=store)
        for _, ts, raw in reader.messages(connections=[conn_in]):
            writer.write(conn_out, ts, raw)
    with pytest.raises(bag.BagError, match=r"missing topic.*ground_truth"):
        bag.read_bag(tmp_path / "imu_only")


def test_kind_constants_match_message_definition() -> None:
    text = (bag._msg_dir() / "RotorSpeeds.msg").read_text()
    for name, value in (("KIND_RAD_PER_SEC", bag.KIND_RAD_PER_SEC), ("KIND_RPM", bag.KIND_RPM)):
        assert f"uint8 {name} = {value}" in text
    assert f"uint8 KIND_NORMALIZED = {bag.KIND_NORMALIZED}" in text


@pytest.mark.ros
def test_rclpy_deserialises_bag_messages(tmp_path: Path, ros_domain: int) -> None:
    from nav_msgs.msg import Odometry
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Imu

    from velobins_msgs.msg import RotorSpeeds

    flight = make_flight(n=20, t0=5.0)
    bag.write_bag(flight, tmp_path / "b")
    seen = set()
    with Reader(tmp_path / "b") as reader:
        for conn, _, raw in reader.messages():
            cls = {bag.TOPIC_IMU: Imu, bag.TOPIC_ROTOR: RotorSpeeds, bag.TOPIC_GT: Odometry}[conn.topic]
            msg = deserialize_message(bytes(raw), cls)
            i = round((msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9 - 5.0) / 0.01)
            if cls is Imu:
                assert msg.header.frame_id == "base_link" and msg.orientation_covariance[0] == -1.0
                np.testing.assert_allclose(
                    [msg.linear_acceleration.x, msg.angular_velocity.z], [flight.acc[i, 0], flight.gyro[i, 2]]
                )
            elif cls is RotorSpeeds:
                assert msg.kind == RotorSpeeds.KIND_NORMALIZED
                np.testing.assert_allclose(msg.speeds, flight.rotor[i])
            else:
                assert (msg.header.frame_id, msg.child_frame_id) == ("odom", "base_link")
                np.testing.assert_allclose(msg.pose.pose.position.x, flight.p[i, 0])
                vb = flight.body_velocity()[i]
                np.testing.assert_allclose([msg.twist.twist.linear.x, msg.twist.twist.linear.y], vb[:2], atol=1e-12)
            seen.add(conn.topic)
    assert seen == {bag.TOPIC_IMU, bag.TOPIC_ROTOR, bag.TOPIC_GT}
