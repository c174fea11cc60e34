"""Conversion core of the IMU bridge: an autopilot's IMU message -> body-frame SI IMU sample.

The network and EKF nodes read ``sensor_msgs/Imu`` in SI units in the body frame (REP-103 FLU).
Vehicles publish the IMU otherwise: Crazyswarm2 logs the accelerometer in g and the gyro in deg/s
as a ``LogDataGeneric`` ``values`` array; PX4 over uXRCE-DDS publishes ``SensorCombined`` (rates,
FRD) and ``VehicleImu`` (integrated deltas over ``delta_*_dt`` µs, FRD) stamped in microseconds;
mavros publishes ``sensor_msgs/Imu`` already in FLU and SI but with its own ``frame_id``. The bridge
node (``imu_node.py``, a thin adapter) feeds each message to :class:`ImuConverter` here and
publishes what it returns as ``sensor_msgs/Imu``. Nothing here imports rclpy or a message package.

Per message, in this order (docs/imu_bridge.md):

1. **validity**: with ``invalid_field``, a message whose field equals ``invalid_value`` is dropped
   (px4 ``SensorCombined.accelerometer_timestamp_relative`` = 0x7fffffff: accelerometer invalid);
2. **extract** three values for each sensor along ``acc_field`` / ``gyro_field``: a vector
   sub-message (``x``, ``y``, ``z``) or an array, from which ``acc_index`` / ``gyro_index`` pick;
3. **deltas -> rates**: with ``acc_dt_field`` / ``gyro_dt_field`` the values are integrals over
   that period (``dt × dt_scale`` seconds), divided by it (a period <= 0 drops the message);
4. **units**: accelerometer ``m/s^2`` or ``g`` (× standard gravity), gyro ``rad/s`` or ``deg/s``;
5. **axes**: ``flu`` as is, ``frd`` -> FLU by 180° about x, ``(x, y, z) -> (x, -y, -z)``;
6. **stamp** from ``header.stamp``, the arrival time, or a numeric field (px4 ``timestamp``, µs).

A NaN or infinity anywhere drops the message. The output frame is ``frame_prefix + frame_id``: the
IMU message then names the body frame the nodes expect, so no static transform is needed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from velobins_common.constants import DEG_TO_RAD, MICROSECONDS_TO_S, STANDARD_GRAVITY
from velobins_common.fields import param
from velobins_common.health import WARN, Status

from .messages import STAMP_SOURCES, Drop, check_paths, message_stamp, parse_path, parse_type_name, resolve, stamp_paths

ACC_UNITS = {"m/s^2": 1.0, "g": STANDARD_GRAVITY}
"""Accelerometer units and their factor to m/s² (g: standard gravity, what IMU drivers scale by)."""
GYRO_UNITS = {"rad/s": 1.0, "deg/s": DEG_TO_RAD}
"""Gyro units and their factor to rad/s."""
AXES = ("flu", "frd")
"""Axes of the input: flu (x forward, y left, z up; REP-103) or frd (x forward, y right, z down)."""


@dataclass(frozen=True)
class ImuBridgeConfig:
    """Parameters of the IMU bridge (node ``velobins_imu_bridge``; presets in
    velobins_bringup/config/imu_bridge/)."""

    input_type: str = param("sensor_msgs/msg/Imu", live=False)
    """Input message type as ``<package>/msg/<Type>``, resolved at start-up."""
    input_topic: str = param("imu/data_raw", live=False)
    """Input topic (relative, so it follows the node's namespace)."""
    output_topic: str = param("imu", live=False)
    """Output sensor_msgs/Imu topic (relative): the network and EKF nodes' imu_topic."""
    frame_id: str = param("base_link", live=False)
    """header.frame_id of the published Imu: the body frame (frame_prefix is prepended)."""
    frame_prefix: str = param("", live=False)
    """Prepended to frame_id (tf_prefix style, e.g. 'drone1/'), as in the network and EKF nodes."""
    acc_field: str = param("linear_acceleration", live=False)
    """Path to the accelerometer: a vector sub-message (x, y, z) or an array (picked by acc_index)."""
    acc_index: tuple[int, ...] = param((0, 1, 2), live=False)
    """Indices of the x, y, z accelerometer values in the array at acc_field (0-based)."""
    gyro_field: str = param("angular_velocity", live=False)
    """Path to the gyro: a vector sub-message (x, y, z) or an array (picked by gyro_index)."""
    gyro_index: tuple[int, ...] = param((0, 1, 2), live=False)
    """Indices of the x, y, z gyro values in the array at gyro_field (0-based)."""
    acc_unit: str = param("m/s^2", choices=tuple(ACC_UNITS), live=False)
    """Unit of the accelerometer values (of the rate, or of the delta per second with acc_dt_field)."""
    gyro_unit: str = param("rad/s", choices=tuple(GYRO_UNITS), live=False)
    """Unit of the gyro values (of the rate, or of the delta per second with gyro_dt_field)."""
    axes: str = param("flu", choices=AXES, live=False)
    """Axes of both sensors: flu (REP-103) or frd (PX4, most flight controllers; turned into FLU)."""
    acc_dt_field: str = param("", live=False)
    """When set, acc_field holds a delta velocity over this integration period (px4 VehicleImu)."""
    gyro_dt_field: str = param("", live=False)
    """When set, gyro_field holds a delta angle over this integration period (px4 VehicleImu)."""
    dt_scale: float = param(MICROSECONDS_TO_S, min=0.0, live=False)
    """Seconds per unit of the dt fields (px4 periods are microseconds: 1e-6)."""
    invalid_field: str = param("", live=False)
    """Optional path to a field whose value invalid_value marks the message invalid (dropped)."""
    invalid_value: int = param(0, live=False)
    """Value of invalid_field that marks an invalid sample (px4 RELATIVE_TIMESTAMP_INVALID: 2147483647)."""
    stamp_source: str = param("header", choices=STAMP_SOURCES, live=False)
    """Output stamp: header (header.stamp), receive (node clock on arrival) or field (stamp_field)."""
    stamp_field: str = param("timestamp", live=False)
    """Path to a numeric time field, used when stamp_source is field."""
    stamp_field_scale: float = param(MICROSECONDS_TO_S, min=0.0, live=False)
    """Seconds per unit of stamp_field (px4 timestamps are microseconds: 1e-6)."""
    input_queue_depth: int = param(200, min=1, max=10000, live=False)
    """Queue depth of the input subscription (deep enough for 1 kHz bursts)."""
    diagnostics_period: float = param(1.0, min=0.05, max=60.0, live=False)
    """Seconds (wall) between the node's diagnostic_msgs/DiagnosticArray messages on /diagnostics."""
    input_timeout: float = param(0.5, min=0.01, max=60.0, live=False)
    """Wall seconds without an input message after which the stream counts as stopped (diagnostics)."""

    def __post_init__(self) -> None:
        parse_type_name(self.input_type)
        for name in ("acc_field", "gyro_field"):
            parse_path(getattr(self, name))
        for name in ("acc_dt_field", "gyro_dt_field", "invalid_field"):
            if getattr(self, name):
                parse_path(getattr(self, name))
        if self.stamp_source == "field":
            parse_path(self.stamp_field)
        for name in ("acc_index", "gyro_index"):
            index = getattr(self, name)
            if len(index) != 3 or any(i < 0 for i in index):
                raise ValueError(f"'{name}' must be three indices >= 0 (x, y, z), got {list(index)}")

    @property
    def output_frame(self) -> str:
        """The frame id of the published IMU messages."""
        return self.frame_prefix + self.frame_id


class ImuSample(NamedTuple):
    """A converted sample: stamp [s], specific force [m/s²] and angular rate [rad/s], body FLU."""

    stamp: float
    acc: tuple[float, float, float]
    gyro: tuple[float, float, float]


def _vector(value: Any, index: Sequence[int]) -> list[float]:
    """Three numbers from a vector sub-message (x, y, z) or from an array at ``index``."""
    if all(hasattr(value, axis) for axis in "xyz"):
        value = (value.x, value.y, value.z)
    items = list(value)
    if max(index) >= len(items):
        raise IndexError(f"{len(items)} values, index {max(index)} needed")
    return [float(items[i]) for i in index]


class ImuConverter:
    """Turns one input message into an :class:`ImuSample` or a :class:`Drop` (see the module docstring)."""

    def __init__(self, config: ImuBridgeConfig) -> None:
        self.config = config
        self._acc_scale = ACC_UNITS[config.acc_unit]
        self._gyro_scale = GYRO_UNITS[config.gyro_unit]
        self._flip = config.axes == "frd"

    def check_type(self, example: Any) -> None:
        """Fail at start-up when a configured path does not exist on ``example`` (a default-built message)."""
        cfg = self.config
        paths = [("acc_field", cfg.acc_field), ("gyro_field", cfg.gyro_field)]
        paths += [(n, getattr(cfg, n)) for n in ("acc_dt_field", "gyro_dt_field", "invalid_field") if getattr(cfg, n)]
        check_paths(example, cfg.input_type, paths + stamp_paths(cfg.stamp_source, cfg.stamp_field))

    def stamp(self, msg: Any, receive_time: float) -> float:
        """The output stamp [s] of ``msg`` by ``stamp_source``."""
        cfg = self.config
        return message_stamp(msg, receive_time, cfg.stamp_source, cfg.stamp_field, cfg.stamp_field_scale)

    def _rate(self, msg: Any, field: str, index: Sequence[int], dt_field: str, scale: float) -> list[float] | Drop:
        values = _vector(resolve(msg, field), index)
        if dt_field:
            dt = float(resolve(msg, dt_field)) * self.config.dt_scale
            if not dt > 0.0:
                return Drop("bad_dt", f"{dt_field} is {resolve(msg, dt_field)!r}: no integration period")
            scale = scale / dt
        out = [v * scale for v in values]
        if self._flip:
            out = [out[0], -out[1], -out[2]]
        return out

    def convert(self, msg: Any, receive_time: float) -> ImuSample | Drop:
        """One message -> :class:`ImuSample` or :class:`Drop` (reason, detail)."""
        cfg = self.config
        try:
            if cfg.invalid_field and int(resolve(msg, cfg.invalid_field)) == cfg.invalid_value:
                return Drop(
                    "invalid", f"{cfg.invalid_field} = {cfg.invalid_value} (the source marks the sample invalid)"
                )
            acc = self._rate(msg, cfg.acc_field, cfg.acc_index, cfg.acc_dt_field, self._acc_scale)
            gyro = self._rate(msg, cfg.gyro_field, cfg.gyro_index, cfg.gyro_dt_field, self._gyro_scale)
            stamp = self.stamp(msg, receive_time)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            return Drop("bad_message", f"{cfg.input_type}: {exc}")
        for part in (acc, gyro):
            if isinstance(part, Drop):
                return part
        if not all(math.isfinite(v) for v in (*acc, *gyro)):
            return Drop("non_finite", f"acc {acc}, gyro {gyro}")
        if not math.isfinite(stamp) or stamp <= 0.0:
            return Drop("bad_stamp", f"stamp {stamp!r} (ROS reads time 0 as unset)")
        return ImuSample(stamp, (acc[0], acc[1], acc[2]), (gyro[0], gyro[1], gyro[2]))


# ----------------------------------------------------------------------------- health
FORCE_WINDOW = 100
"""Samples over which the mean specific-force magnitude is reported (1 s at 100 Hz)."""
FORCE_RANGE = (0.5 * STANDARD_GRAVITY, 3.0 * STANDARD_GRAVITY)
"""Mean specific-force magnitudes [m/s²] a multirotor can show over a second, at rest or flying.
Outside it the units are wrong: a source in g read as m/s² shows about 1 at rest, a source in
m/s² read with ``acc_unit: g`` about 96."""


class ForceMeter:
    """Mean ``|f|`` of the last :data:`FORCE_WINDOW` samples: at rest it must read g (a unit check)."""

    def __init__(self, window: int = FORCE_WINDOW) -> None:
        self._norms: deque[float] = deque(maxlen=window)

    def add(self, acc: Sequence[float]) -> None:
        self._norms.append(math.sqrt(sum(a * a for a in acc)))

    def mean(self) -> float | None:
        return sum(self._norms) / len(self._norms) if self._norms else None


def force_problem(mean_force: float | None) -> Status | None:
    """A WARN when the mean specific force of the recent samples [m/s²] is implausible (wrong units), else None."""
    if mean_force is None or FORCE_RANGE[0] <= mean_force <= FORCE_RANGE[1]:
        return None
    return Status(
        WARN,
        f"mean specific force {mean_force:.2f} m/s² is implausible (at rest it reads "
        f"{STANDARD_GRAVITY:.2f}): check acc_unit and the acceleration field",
    )
