"""Conversion core of the odometry-out bridge: the EKF's odometry -> what an autopilot fuses.

The EKF node publishes ``nav_msgs/Odometry`` in REP-103/105 frames: the pose of the body (FLU)
in ``odom`` (z up, heading where the filter started), the twist in the body frame. Autopilots take
external odometry in their own conventions:

* **PX4** (``px4_msgs/VehicleOdometry`` on ``fmu/in/vehicle_visual_odometry``, fused by EKF2 as
  external vision): z-down frames. ``pose_frame`` FRD (``POSE_FRAME_FRD``: a z-down world frame with
  an arbitrary heading, which EKF2 aligns itself; the default, since our ``odom`` is not north-
  aligned) or NED (``POSE_FRAME_NED``: only for an ``odom`` frame that is ENU-aligned, x east, y north).
  ``q`` rotates body FRD into that frame, Hamilton, ``(w, x, y, z)``. The velocity is given in the
  body FRD frame (``VELOCITY_FRAME_BODY_FRD``, what the network measures and needs no heading) or in
  the pose frame. Variances are three diagonals: position (pose frame), orientation (body frame),
  velocity (velocity frame). Stamps are microseconds: ``timestamp_sample`` the estimate's stamp,
  ``timestamp`` the publication time; the uXRCE-DDS client turns both from the agent's clock (ROS
  time) into PX4 time with its timesync offset.
* **mavros** (``nav_msgs/Odometry`` on ``mavros/odometry/out``, sent as MAVLink ``ODOMETRY`` to PX4
  or ArduPilot): REP-147, ENU/FLU, as our odometry already is. mavros rotates it into
  ``odom_ned``/``base_link_frd`` through the static transforms it publishes from its own frame names
  (``odom``, ``base_link``), so only the frame ids change (``frame_id``, ``child_frame_id``).

Frames as linear maps (vectors are columns): ``M_b = diag(1, -1, -1)`` takes body FRD to body FLU
(its own inverse); ``M_w`` takes our world to the autopilot's: ``diag(1, -1, -1)`` for FRD,
``[[0, 1, 0], [1, 0, 0], [0, 0, -1]]`` (x<->y, z down) for ENU -> NED. With ``R`` the body FLU -> odom
rotation: position ``M_w p``; attitude ``M_w R M_b``; body FRD velocity ``M_b v_b``; world velocity
``M_w R v_b``. A covariance ``Σ`` of ``x`` becomes ``M Σ Mᵀ`` for ``y = M x``; the orientation error of
our pose covariance is about the odom axes and PX4 wants it about the body axes: ``M_b Rᵀ Σ R M_b``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from velobins_common.fields import param
from velobins_common.frames import is_unit_quaternion, matrix_to_quaternion, quaternion_to_matrix

from .messages import Drop, parse_type_name

MODES = ("px4", "mavros")
POSE_FRAMES = ("frd", "ned")
VELOCITY_FRAMES = ("body_frd", "pose_frame")
DEFAULT_OUTPUT_TOPICS = {"px4": "fmu/in/vehicle_visual_odometry", "mavros": "mavros/odometry/out"}
"""Output topic of each mode when ``output_topic`` is empty (relative: PX4's and mavros' own names)."""

POSE_FRAME_NED, POSE_FRAME_FRD = 1, 2
VELOCITY_FRAME_NED, VELOCITY_FRAME_FRD, VELOCITY_FRAME_BODY_FRD = 1, 2, 3
"""px4_msgs/VehicleOdometry's enums (mirrored: px4_msgs is resolved at run time; the node checks them)."""

FRD_FLU = np.diag([1.0, -1.0, -1.0])
"""Body FRD <-> FLU, and FLU world -> FRD world (180° about x, its own inverse)."""
ENU_NED = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
"""ENU -> NED (its own inverse)."""
UINT8_RANGE = 256


@dataclass(frozen=True)
class OdomOutConfig:
    """Parameters of the odometry-out bridge (node ``velobins_odom_out``; set by the platform configs)."""

    mode: str = param("px4", choices=MODES, live=False)
    """px4 (px4_msgs/VehicleOdometry, NED/FRD) or mavros (nav_msgs/Odometry, ENU/FLU)."""
    input_topic: str = param("velobins/odometry", live=False)
    """The EKF's nav_msgs/Odometry (its odometry_topic; relative)."""
    output_topic: str = param("", live=False)
    """Output topic (relative); empty: fmu/in/vehicle_visual_odometry (px4), mavros/odometry/out (mavros)."""
    px4_type: str = param("px4_msgs/msg/VehicleOdometry", live=False)
    """The PX4 message type, resolved at start-up (px4 mode)."""
    pose_frame: str = param("frd", choices=POSE_FRAMES, live=False)
    """px4: frd (z-down, heading of odom: EKF2 aligns it) or ned (only for an ENU-aligned odom frame)."""
    velocity_frame: str = param("body_frd", choices=VELOCITY_FRAMES, live=False)
    """px4: body_frd (the body velocity, heading-free) or pose_frame (the world velocity in pose_frame)."""
    send_pose: bool = param(True, live=False)
    """px4: send position and attitude; false sends them as NaN (invalid), so EKF2 takes the velocity only."""
    quality: int = param(100, min=0, max=100, live=False)
    """px4: the quality field (0 = invalid, PX4 marks it unused)."""
    frame_id: str = param("odom", live=False)
    """mavros: header.frame_id, the world frame mavros connects to odom_ned (mavros' odom_frame_id)."""
    child_frame_id: str = param("base_link", live=False)
    """mavros: child_frame_id, the body frame mavros connects to base_link_frd (mavros' base_link_frame_id)."""
    max_rate: float = param(0.0, min=0.0, max=1000.0, live=False)
    """Publish at most this many messages per second of odometry time; 0 forwards every message."""
    diagnostics_period: float = param(1.0, min=0.05, max=60.0, live=False)
    """Seconds (wall) between the node's diagnostic_msgs/DiagnosticArray messages on /diagnostics."""
    input_timeout: float = param(0.5, min=0.01, max=60.0, live=False)
    """Wall seconds without odometry after which the input counts as stopped (diagnostics)."""

    def __post_init__(self) -> None:
        parse_type_name(self.px4_type, "px4_type")

    @property
    def topic(self) -> str:
        """The output topic, the mode's default when ``output_topic`` is empty."""
        return self.output_topic or DEFAULT_OUTPUT_TOPICS[self.mode]


@dataclass(frozen=True)
class Odometry:
    """The fields of a ``nav_msgs/Odometry`` the bridge reads, as plain numbers (REP-103 frames).

    Attributes:
        stamp: header stamp [s].
        position: body origin in the world frame [m].
        orientation: body FLU -> world rotation, quaternion (x, y, z, w).
        linear: body-frame velocity [m/s].
        angular: body-frame angular rate [rad/s].
        pose_covariance: 6x6 row-major (x, y, z, rotation about the world x, y, z axes).
        twist_covariance: 6x6 row-major (body vx, vy, vz, rates about the body axes).
    """

    stamp: float
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]
    linear: tuple[float, float, float]
    angular: tuple[float, float, float]
    pose_covariance: tuple[float, ...]
    twist_covariance: tuple[float, ...]


@dataclass(frozen=True)
class Px4Odometry:
    """The fields of a ``px4_msgs/VehicleOdometry`` (the node copies them into the message)."""

    timestamp: int
    timestamp_sample: int
    pose_frame: int
    position: tuple[float, float, float]
    q: tuple[float, float, float, float]
    """Body FRD -> pose frame, Hamilton (w, x, y, z)."""
    velocity_frame: int
    velocity: tuple[float, float, float]
    angular_velocity: tuple[float, float, float]
    position_variance: tuple[float, float, float]
    orientation_variance: tuple[float, float, float]
    velocity_variance: tuple[float, float, float]
    reset_counter: int
    quality: int


def check(odom: Odometry) -> Drop | None:
    """Why ``odom`` cannot be sent (non-finite values, an orientation that is not a rotation), or None."""
    numbers = (odom.stamp, *odom.position, *odom.orientation, *odom.linear, *odom.angular)
    if not all(math.isfinite(v) for v in numbers):
        return Drop("non_finite", "odometry with NaN or infinity")
    if len(odom.pose_covariance) != 36 or len(odom.twist_covariance) != 36:
        return Drop("bad_covariance", "covariances must have 36 entries")
    if not is_unit_quaternion(odom.orientation):
        return Drop("bad_orientation", f"quaternion {odom.orientation} is not unit")
    return None


def _diag3(m: np.ndarray) -> tuple[float, float, float]:
    return float(m[0, 0]), float(m[1, 1]), float(m[2, 2])


def _vec3(v: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    return float(v[0]), float(v[1]), float(v[2])


def to_px4(odom: Odometry, cfg: OdomOutConfig, now: float, reset_counter: int = 0) -> Px4Odometry:
    """``odom`` as PX4's ``VehicleOdometry`` (module docstring); ``now`` [s] is the publication time."""
    world = ENU_NED if cfg.pose_frame == "ned" else FRD_FLU
    rot = quaternion_to_matrix(odom.orientation)  # body FLU -> odom
    v_body = np.asarray(odom.linear)
    pose_cov = np.asarray(odom.pose_covariance, dtype=np.float64).reshape(6, 6)
    twist_cov = np.asarray(odom.twist_covariance, dtype=np.float64).reshape(6, 6)
    x, y, z, w = matrix_to_quaternion(world @ rot @ FRD_FLU)
    position = _vec3(world @ np.asarray(odom.position))
    q = (w, x, y, z)
    position_var = _diag3(world @ pose_cov[:3, :3] @ world.T)
    rot_body = FRD_FLU @ rot.T  # odom axes -> body FRD axes
    orientation_var = _diag3(rot_body @ pose_cov[3:, 3:] @ rot_body.T)
    if not cfg.send_pose:
        nan3 = (math.nan, math.nan, math.nan)
        position, q, position_var, orientation_var = nan3, (math.nan,) * 4, nan3, nan3  # type: ignore[assignment]
    if cfg.velocity_frame == "body_frd":
        to_frame = FRD_FLU
        velocity_frame = VELOCITY_FRAME_BODY_FRD
    else:
        to_frame = world @ rot
        velocity_frame = VELOCITY_FRAME_NED if cfg.pose_frame == "ned" else VELOCITY_FRAME_FRD
    return Px4Odometry(
        timestamp=round(now * 1e6),
        timestamp_sample=round(odom.stamp * 1e6),
        pose_frame=POSE_FRAME_NED if cfg.pose_frame == "ned" else POSE_FRAME_FRD,
        position=position,
        q=q,
        velocity_frame=velocity_frame,
        velocity=_vec3(to_frame @ v_body),
        angular_velocity=_vec3(FRD_FLU @ np.asarray(odom.angular)),
        position_variance=position_var,
        orientation_variance=orientation_var,
        velocity_variance=_diag3(to_frame @ twist_cov[:3, :3] @ to_frame.T),
        reset_counter=reset_counter % UINT8_RANGE,
        quality=cfg.quality,
    )


class Throttle:
    """Forwards a stamp when at least ``1 / max_rate`` seconds of odometry time passed since the last
    forwarded one (``max_rate`` 0: every stamp); a stamp going back (a filter restart) always passes
    and counts as a reset."""

    def __init__(self, max_rate: float) -> None:
        self.period = 1.0 / max_rate if max_rate > 0 else 0.0
        self._last: float | None = None
        self._last_seen: float | None = None
        self.resets = 0
        """Times the stamps went back: the filter restarted (PX4's reset_counter)."""

    def accept(self, stamp: float) -> bool:
        if self._last_seen is not None and stamp < self._last_seen:
            self.resets += 1
            self._last = None
        self._last_seen = stamp
        if self._last is not None and stamp - self._last < self.period - 1e-9:
            return False
        self._last = stamp
        return True
