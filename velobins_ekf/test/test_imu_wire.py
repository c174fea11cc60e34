"""The raw IMU reader gives what rclpy's deserialization gives, for any frame id length."""

from __future__ import annotations

import pytest

from velobins_ekf.imu_wire import ImuView, WireError

rclpy = pytest.importorskip("rclpy", reason="the wire format test needs rclpy's serializer")


@pytest.mark.parametrize("frame", ["", "b", "base_link", "drone2/imu_link_with_a_long_name"])
def test_parse_matches_rclpy(frame: str) -> None:
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Imu

    msg = Imu()
    msg.header.frame_id = frame
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_700_000_123, 456_789_012
    msg.orientation.w = 0.5
    msg.orientation_covariance[0] = -1.0
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = 0.1, -0.2, 3.5
    msg.angular_velocity_covariance[8] = 7.0
    msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = -1.5, 0.25, 9.81
    msg.linear_acceleration_covariance[4] = 2.0
    view = ImuView()
    view.parse(serialize_message(msg))
    assert view.header.frame_id == frame
    assert (view.header.stamp.sec, view.header.stamp.nanosec) == (1_700_000_123, 456_789_012)
    assert (view.angular_velocity.x, view.angular_velocity.y, view.angular_velocity.z) == (0.1, -0.2, 3.5)
    a = view.linear_acceleration
    assert (a.x, a.y, a.z) == (-1.5, 0.25, 9.81)
    with pytest.raises(WireError):
        view.parse(serialize_message(msg)[:-8])
    with pytest.raises(WireError):
        view.parse(b"\x00\x01")
