"""``sensor_msgs/Imu`` read straight from its serialized bytes (a raw subscription): the EKF node's IMU fast path.

At 1 kHz (and more in a fast replay) building the rclpy message object costs more than everything the
node then does with the sample: the header, three covariance arrays of nine doubles and four vectors
become Python objects, of which the filter needs seven numbers and the frame id. The node therefore
subscribes with ``raw=True`` and reads those from the CDR bytes at their fixed offsets (little- or
big-endian, per the encapsulation header). Layout (XCDR1, alignment relative to the byte after the
4-byte encapsulation header)::

    int32 sec, uint32 nanosec, uint32 len, char frame_id[len] (with its NUL), pad to 8,
    double orientation[4], orientation_covariance[9], angular_velocity[3], angular_velocity_covariance[9],
    linear_acceleration[3], linear_acceleration_covariance[9]

:class:`ImuView` has the attributes of an ``Imu`` message the node reads (``header.frame_id``,
``angular_velocity``, ``linear_acceleration``), so the IMU frame handling takes it as it takes a message;
one view is filled in place per sample (no allocation but the frame id's string when it changes); its
``header.stamp`` has ``sec`` and ``nanosec`` like a ``builtin_interfaces/Time``.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

_HEAD = {0: struct.Struct(">iII"), 1: struct.Struct("<iII")}  # encapsulation kind & 1: little endian
_VEC = {0: struct.Struct(">3d"), 1: struct.Struct("<3d")}
_GYRO_OFFSET = 8 * (4 + 9)  # after orientation and its covariance
_ACC_OFFSET = _GYRO_OFFSET + 8 * (3 + 9)  # after the angular velocity and its covariance
_SIZE_AFTER_NAME = _ACC_OFFSET + 8 * (3 + 9)


class WireError(ValueError):
    """The bytes are not a serialized ``sensor_msgs/Imu``."""


class ImuView:
    """What the node reads of one IMU message, filled in place by :meth:`parse`."""

    __slots__ = ("_frame_raw", "angular_velocity", "header", "linear_acceleration")

    def __init__(self) -> None:
        self.header = SimpleNamespace(frame_id="", stamp=SimpleNamespace(sec=0, nanosec=0))
        self.linear_acceleration = SimpleNamespace(x=0.0, y=0.0, z=0.0)
        self.angular_velocity = SimpleNamespace(x=0.0, y=0.0, z=0.0)
        self._frame_raw = b""

    def parse(self, raw: bytes) -> None:
        """Fill the view from one serialized message; :class:`WireError` when the bytes do not fit."""
        try:
            little = raw[1] & 1
            sec, nanosec, length = _HEAD[little].unpack_from(raw, 4)
            end = 16 + length
            if length == 0 or end > len(raw):
                raise WireError(f"frame_id length {length} does not fit {len(raw)} bytes")
            name = raw[16 : end - 1]
            if name != self._frame_raw:
                self._frame_raw = name
                self.header.frame_id = name.decode("utf-8", errors="replace")
            base = 4 + ((end - 4 + 7) // 8) * 8  # align 8 after the string
            if base + _SIZE_AFTER_NAME > len(raw):
                raise WireError(f"{len(raw)} bytes: too short for sensor_msgs/Imu")
            vec = _VEC[little]
            w, a = self.angular_velocity, self.linear_acceleration
            w.x, w.y, w.z = vec.unpack_from(raw, base + _GYRO_OFFSET)
            a.x, a.y, a.z = vec.unpack_from(raw, base + _ACC_OFFSET)
        except (struct.error, IndexError) as exc:
            raise WireError(str(exc)) from exc
        self.header.stamp.sec, self.header.stamp.nanosec = sec, nanosec
