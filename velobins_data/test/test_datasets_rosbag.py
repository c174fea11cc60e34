"""The recorded-bag adapter (``--dataset rosbag``) on bags written the way ``ros2 bag record`` writes them:
streams at their own rates and spans, under a namespace, beside other topics of the same types, no
VeloBins metadata. Built with rosbags, so no ROS install is needed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer

from velobins_common.constants import RPM_TO_RAD_PER_S
from velobins_data.bag import KIND_RPM, typestore
from velobins_data.datasets import DatasetError, load_flight
from velobins_data.datasets.rosbag import find_topics, load_rosbag

NS = "/drone1"
T0 = 1_700_000_000.0


def _stamp(store, t: float):
    ns = round(t * 1e9)
    return store.types["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def write_recording(
    path: Path,
    *,
    imu_frame: str = "drone1/base_link",
    pose_only: bool = False,
    tf_static: tuple | None = None,
    namespaces: tuple[str, ...] = (NS,),
) -> dict[str, np.ndarray]:
    """A 4 s recording: IMU at 200 Hz from T0, rotor (rpm kind) at 50 Hz from T0 + 0.3 s, ground truth
    at 100 Hz from T0 + 0.5 s to T0 + 3.5 s, yawing at 1 rad/s with a quaternion sign flip at every
    other sample; plus an EKF odometry (same type as ground truth) that must be ignored."""
    store = typestore()
    T = store.types
    Header, Vec, Quat = T["std_msgs/msg/Header"], T["geometry_msgs/msg/Vector3"], T["geometry_msgs/msg/Quaternion"]
    t_imu = T0 + np.arange(800) / 200.0
    t_rot = T0 + 0.3 + np.arange(180) / 50.0
    t_gt = T0 + 0.5 + np.arange(301) / 100.0
    truth = {"t_imu": t_imu, "t_rot": t_rot, "t_gt": t_gt}
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        for ns in namespaces:
            c_imu = writer.add_connection(f"{ns}/imu", "sensor_msgs/msg/Imu", typestore=store)
            c_rot = writer.add_connection(f"{ns}/rotor_speeds", "velobins_msgs/msg/RotorSpeeds", typestore=store)
            c_gt = writer.add_connection(f"{ns}/ground_truth/odometry", "nav_msgs/msg/Odometry", typestore=store)
            c_ekf = writer.add_connection(f"{ns}/velobins/odometry", "nav_msgs/msg/Odometry", typestore=store)
            for i, t in enumerate(t_imu):
                msg = T["sensor_msgs/msg/Imu"](
                    header=Header(stamp=_stamp(store, t), frame_id=imu_frame),
                    orientation=Quat(x=0.0, y=0.0, z=0.0, w=1.0),
                    orientation_covariance=np.array([-1.0] + [0.0] * 8),
                    angular_velocity=Vec(x=0.01 * i, y=0.0, z=1.0),
                    angular_velocity_covariance=np.zeros(9),
                    linear_acceleration=Vec(x=0.1, y=-0.2, z=9.81),
                    linear_acceleration_covariance=np.zeros(9),
                )
                writer.write(c_imu, round(t * 1e9) + 1000, store.serialize_cdr(msg, c_imu.msgtype))
                if i == 10:  # a restamped duplicate
                    writer.write(c_imu, round(t * 1e9) + 2000, store.serialize_cdr(msg, c_imu.msgtype))
            for t in t_rot:
                speeds = np.array([1000.0, 1100.0, 1200.0, 1300.0]) + 100.0 * (t - T0)
                msg = T["velobins_msgs/msg/RotorSpeeds"](
                    header=Header(stamp=_stamp(store, t), frame_id=""), kind=KIND_RPM, speeds=speeds
                )
                writer.write(c_rot, round(t * 1e9) + 1000, store.serialize_cdr(msg, c_rot.msgtype))
            for j, t in enumerate(t_gt):
                yaw = 1.0 * (t - T0)
                q = np.array([0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)]) * (-1.0 if j % 2 else 1.0)
                p = np.array([math.cos(yaw), math.sin(yaw), 1.0])
                v_body = np.zeros(3) if pose_only else np.array([1.0, 0.0, 0.0])  # tangential speed 1 m/s
                odom = T["nav_msgs/msg/Odometry"](
                    header=Header(stamp=_stamp(store, t), frame_id="world"),
                    child_frame_id="drone1",
                    pose=T["geometry_msgs/msg/PoseWithCovariance"](
                        pose=T["geometry_msgs/msg/Pose"](
                            position=T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
                            orientation=Quat(x=q[0], y=q[1], z=q[2], w=q[3]),
                        ),
                        covariance=np.zeros(36),
                    ),
                    twist=T["geometry_msgs/msg/TwistWithCovariance"](
                        twist=T["geometry_msgs/msg/Twist"](
                            linear=Vec(x=v_body[0], y=v_body[1], z=v_body[2]), angular=Vec(x=0.0, y=0.0, z=1.0)
                        ),
                        covariance=np.zeros(36),
                    ),
                )
                for conn, shift in ((c_gt, 0.0), (c_ekf, 5.0)):  # the EKF's estimate: elsewhere
                    if shift:
                        odom.pose.pose.position.x += shift
                    writer.write(conn, round(t * 1e9) + 1000, store.serialize_cdr(odom, conn.msgtype))
        if tf_static is not None:
            c_tf = writer.add_connection("/tf_static", "tf2_msgs/msg/TFMessage", typestore=store)
            parent, child, quat = tf_static
            tf = T["geometry_msgs/msg/TransformStamped"](
                header=Header(stamp=_stamp(store, T0), frame_id=parent),
                child_frame_id=child,
                transform=T["geometry_msgs/msg/Transform"](
                    translation=Vec(x=0.0, y=0.0, z=0.0), rotation=Quat(x=quat[0], y=quat[1], z=quat[2], w=quat[3])
                ),
            )
            msg = T["tf2_msgs/msg/TFMessage"](transforms=[tf])
            writer.write(c_tf, round(T0 * 1e9), store.serialize_cdr(msg, c_tf.msgtype))
    return truth


def test_recorded_bag_reads_into_the_overlap_of_its_streams(tmp_path: Path) -> None:
    truth = write_recording(tmp_path / "flight_007")
    flight = load_rosbag(tmp_path / "flight_007")
    t = flight.t
    # overlap: rotor from T0 + 0.3, ground truth T0 + 0.5 .. T0 + 3.5
    assert t[0] == pytest.approx(T0 + 0.5) and t[-1] == pytest.approx(T0 + 3.5)
    expected_t = truth["t_imu"][(truth["t_imu"] >= T0 + 0.5 - 1e-9) & (truth["t_imu"] <= T0 + 3.5 + 1e-9)]
    np.testing.assert_allclose(t, expected_t, rtol=0, atol=1e-6)  # ns stamps of float seconds
    assert flight.name == "flight_007" and flight.rotor_kind == "speed"  # rad/s, converted from rev/min
    assert flight.metadata["repeated_imu_stamps_dropped"] == 1
    assert flight.metadata["topics"]["ground_truth"] == "/drone1/ground_truth/odometry"
    np.testing.assert_allclose(flight.acc, np.tile([0.1, -0.2, 9.81], (len(t), 1)))
    speeds = (np.array([1000.0, 1100.0, 1200.0, 1300.0]) + 100.0 * (t - T0)[:, None]) * RPM_TO_RAD_PER_S
    np.testing.assert_allclose(flight.rotor, speeds, rtol=1e-7)  # linear in t; epoch floats hold 0.24 µs
    yaw = t - T0
    np.testing.assert_allclose(flight.p[:, 0], np.interp(t, truth["t_gt"], np.cos(truth["t_gt"] - T0)), atol=1e-6)
    # the sign flips of the source do not show: the interpolated quaternion is the yaw's (up to one global sign)
    q_ref = np.stack([np.zeros_like(yaw), np.zeros_like(yaw), np.sin(yaw / 2), np.cos(yaw / 2)], axis=1)
    np.testing.assert_allclose(np.abs(np.sum(flight.q * q_ref, axis=1)), 1.0, atol=1e-4)
    # body velocity (1, 0, 0) rotated by the yaw: world (cos, sin, 0)
    np.testing.assert_allclose(flight.v[:, :2], np.stack([np.cos(yaw), np.sin(yaw)], axis=1), atol=1e-4)


def test_pose_only_ground_truth_is_differentiated(tmp_path: Path) -> None:
    write_recording(tmp_path / "bag", pose_only=True)
    flight = load_rosbag(tmp_path / "bag")
    assert flight.metadata["ground_truth_velocity"] == "position derivative"
    yaw = flight.t - T0
    inner = slice(5, -5)  # one-sided differences at the ends
    np.testing.assert_allclose(flight.v[inner, 0], -np.sin(yaw[inner]), atol=1e-3)
    np.testing.assert_allclose(flight.v[inner, 1], np.cos(yaw[inner]), atol=1e-3)


def test_imu_in_another_frame_is_rotated_by_the_recorded_tf_static(tmp_path: Path) -> None:
    frd = ("drone1/base_link", "drone1/imu_frd", (1.0, 0.0, 0.0, 0.0))  # 180° about x
    write_recording(tmp_path / "bag", imu_frame="drone1/imu_frd", tf_static=frd)
    flight = load_rosbag(tmp_path / "bag")
    np.testing.assert_allclose(flight.acc[0], [0.1, 0.2, -9.81])
    write_recording(tmp_path / "bare", imu_frame="drone1/imu_frd")
    with pytest.raises(DatasetError, match=r"IMU frame 'drone1/imu_frd' is not the body frame.*record the IMU bridge"):
        load_rosbag(tmp_path / "bare")


def test_topics_are_found_by_name_and_namespace(tmp_path: Path) -> None:
    conns = [("/a/imu", "sensor_msgs/msg/Imu"), ("/b/imu", "sensor_msgs/msg/Imu"), ("/a/rotor_speeds", "x")]
    with pytest.raises(DatasetError, match=r"several sensor_msgs/msg/Imu topics \['/a/imu', '/b/imu'\]"):
        find_topics(conns, None, tmp_path)
    with pytest.raises(DatasetError, match=r"no velobins_msgs/msg/RotorSpeeds topic named 'rotor_speeds'"):
        find_topics(conns, "/a", tmp_path)
    write_recording(tmp_path / "two", namespaces=("/drone1", "/drone2"))
    with pytest.raises(DatasetError, match="pass the vehicle's namespace"):
        load_rosbag(tmp_path / "two")
    assert load_rosbag(tmp_path / "two", namespace="/drone2").metadata["topics"]["imu"] == "/drone2/imu"


def test_registered_as_a_dataset_kind(tmp_path: Path) -> None:
    write_recording(tmp_path / "bag")
    flight = load_flight("rosbag", tmp_path / "bag", validate=False)  # a made-up flight: physics not checked
    assert flight.metadata["dataset"] == "rosbag"
    with pytest.raises(DatasetError, match="not a rosbag2 folder"):
        load_flight("rosbag", tmp_path, validate=False)
