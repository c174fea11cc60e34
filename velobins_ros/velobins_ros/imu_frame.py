"""The IMU→body rotation of a node's ``sensor_msgs/Imu`` input: from a parameter or from ``/tf_static``.

The network and the filter need the specific force and angular rate in the body frame (FLU). An
IMU stamped with another frame (``imu_link``, a PX4 FRD IMU) is never taken as body silently:

1. ``imu_to_body`` set (4 or 9 numbers, :func:`velobins_common.frames.parse_rotation`): that
   rotation is applied to every message, whatever its ``frame_id`` (logged once at INFO).
2. Else, ``header.frame_id`` empty or equal to the body frame: identity (an empty ``frame_id`` is
   reported once as a WARN: the body frame is assumed). With a ``frame_prefix`` (``drone2/``), the
   body frame without it (``base_link``) is this vehicle's too, said once at INFO: mavros stamps
   every vehicle's IMU ``base_link`` while the nodes publish ``drone2/base_link``.
3. Else the static transform ``base_frame ← frame_id`` from ``/tf_static`` (what
   ``robot_state_publisher`` and ``static_transform_publisher`` publish; composed through
   intermediate frames by :class:`velobins_common.frames.StaticTransformTree`). This reads the
   topic directly with ``tf2_msgs/TFMessage``, so it works with or without ``tf2_ros``, whose
   listener reads the same topic. Until the transform is known, each message is a counted drop
   (``imu_frame_unknown``) whose first log line says how to fix it, and after ``timeout`` wall
   seconds a throttled ERROR repeats it.

Only the rotation is used; the lever arm is ignored (why: :mod:`velobins_common.frames`).
"""

from __future__ import annotations

import time

import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu

from velobins_common.frames import StaticTransformTree, describe_rotation, is_identity, normalize_frame, parse_rotation

from . import DropCounter

IMU_TO_BODY_DOC = (
    "Rotation of the IMU frame into the body frame (FLU), overriding TF: 4 numbers = quaternion "
    "(x, y, z, w), 9 = row-major rotation matrix (v_body = R v_imu); e.g. [1.0, 0.0, 0.0, 0.0] for an "
    "FRD IMU. Empty: the IMU's header.frame_id is used (empty or the body frame = identity), with the "
    "static transform body <- frame_id from /tf_static."
)
"""Docstring text for the nodes' ``imu_to_body: tuple[float, ...] = ()`` config field."""

IMU_FRAME_TIMEOUT_DOC = (
    "Seconds (wall time) without a static transform for the IMU's frame before a repeated ERROR "
    "(the messages are counted as dropped, imu_frame_unknown, from the first)."
)
"""Docstring text for an optional ``imu_frame_timeout: float = 5.0`` config field."""

DEFAULT_IMU_FRAME_TIMEOUT = 5.0
"""Default of ``timeout`` [s]: long enough for a latched ``/tf_static`` to arrive after start-up."""

TF_STATIC_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
"""The QoS of ``/tf_static`` (as tf2_ros' static listener): latched, so transforms published
before this node started still arrive."""

_ERROR_PERIOD = 10.0
"""Seconds between repeated ERROR lines while the IMU frame stays unknown."""


class ImuFrame:
    """Turns each ``sensor_msgs/Imu`` into body-frame (specific force, angular rate); see the module docstring.

    Args:
        node: the node that owns the ``/tf_static`` subscription and the log.
        base_frame: the body frame (FLU), e.g. ``base_link``.
        imu_to_body: the parameter value; empty to use the messages' ``frame_id`` and TF.
        drops: the node's drop counter (``imu_frame_unknown``).
        timeout: wall seconds a frame may stay unknown before the ERROR log.
        tf_static_topic: the static-transform topic (remappable as usual).
        frame_prefix: the node's ``frame_prefix``, which ``base_frame`` starts with; ``base_frame``
            without it is then taken as the body frame too.

    Raises:
        ValueError: ``imu_to_body`` is not a valid rotation (the message names the parameter).
    """

    def __init__(
        self,
        node: Node,
        base_frame: str,
        imu_to_body: tuple[float, ...],
        drops: DropCounter,
        timeout: float = DEFAULT_IMU_FRAME_TIMEOUT,
        tf_static_topic: str = "/tf_static",
        frame_prefix: str = "",
    ) -> None:
        self._node = node
        self._log = node.get_logger()
        self._base = normalize_frame(base_frame)
        prefixed = bool(frame_prefix) and base_frame.startswith(frame_prefix)
        self._unprefixed = normalize_frame(base_frame[len(frame_prefix) :]) if prefixed else ""
        """The body frame without the prefix ('' without one): an IMU stamped so is this vehicle's."""
        self._drops = drops
        self._timeout = float(timeout)
        self._topic = tf_static_topic
        self._fixed: np.ndarray | None = None
        self._use_param = bool(imu_to_body)
        if self._use_param:
            r = parse_rotation(imu_to_body, name="imu_to_body")
            self._fixed = None if is_identity(r) else r
            self._param_text = describe_rotation(r)
        self._tree = StaticTransformTree()
        self._cache: dict[str, np.ndarray | None] = {}
        """frame_id → rotation into the body frame (None: identity) for frames already resolved."""
        self._announced: dict[str, np.ndarray] = {}
        """frame_id → the TF rotation last logged for it (a changed static transform is logged again)."""
        self._unknown_since: dict[str, float] = {}
        self._last_error = -float("inf")
        self._bad_transforms: set[tuple[str, str]] = set()
        self._no_tf: str = ""
        self.subscription = None
        if not self._use_param:
            try:
                from tf2_msgs.msg import TFMessage
            except ImportError as exc:  # pragma: no cover - tf2_msgs ships with every ROS install and our overlay
                self._no_tf = f"tf2_msgs is not importable ({exc}), so {tf_static_topic} cannot be read; "
            else:
                self.subscription = node.create_subscription(
                    TFMessage, tf_static_topic, self._on_tf_static, TF_STATIC_QOS
                )

    # ------------------------------------------------------------------ public
    def to_body(self, msg: Imu) -> tuple[np.ndarray, np.ndarray] | None:
        """(specific force, angular rate) in the body frame, or None (a counted drop) while the IMU→body
        rotation is unknown."""
        a, w = msg.linear_acceleration, msg.angular_velocity
        acc = np.array((a.x, a.y, a.z), dtype=np.float64)
        gyro = np.array((w.x, w.y, w.z), dtype=np.float64)
        frame = normalize_frame(msg.header.frame_id)
        if frame in self._cache:
            r = self._cache[frame]
        else:
            r = self._resolve(frame)
            if r is False:
                return None
        if r is None:
            return acc, gyro
        return r @ acc, r @ gyro

    def rotation(self, frame_id: str) -> np.ndarray | None:
        """The IMU→body rotation used for messages stamped ``frame_id`` (identity included), or None if unknown."""
        frame = normalize_frame(frame_id)
        if self._use_param:
            return np.eye(3) if self._fixed is None else self._fixed.copy()
        if not frame or frame in (self._base, self._unprefixed):
            return np.eye(3)
        return self._tree.rotation(self._base, frame)

    # ------------------------------------------------------------------ internals
    def _resolve(self, frame: str) -> np.ndarray | bool | None:
        """The rotation for a frame not yet in the cache (None = identity), or False while unknown."""
        if self._use_param:
            self._log.info(
                f"IMU frame {frame or '(empty)'!r} -> {self._base!r}: imu_to_body parameter, {self._param_text}"
            )
            self._cache[frame] = self._fixed
            return self._fixed
        if not frame or frame in (self._base, self._unprefixed):
            if not frame:
                self._log.warning(
                    f"IMU messages have an empty header.frame_id: taking them as the body frame {self._base!r} "
                    "(set frame_id, or imu_to_body if the IMU is mounted rotated)"
                )
            elif frame != self._base:
                self._log.info(
                    f"IMU frame {frame!r} taken as this vehicle's body frame {self._base!r} (the frame_prefix "
                    "is not in the IMU's frame_id; set imu_to_body if the IMU is mounted rotated)"
                )
            self._cache[frame] = None
            return None
        r = self._tree.rotation(self._base, frame)
        if r is None:
            self._unknown(frame)
            return False
        waited = time.monotonic() - self._unknown_since.pop(frame, time.monotonic())
        previous = self._announced.get(frame)
        if previous is None or not np.allclose(previous, r, atol=1e-9):
            self._log.info(
                f"IMU frame {frame!r} -> {self._base!r} from {self._topic}"
                + (" (changed)" if previous is not None else "")
                + f": {describe_rotation(r)}"
                + (f" (after {waited:.1f} s)" if waited > 0.05 else "")
            )
            self._announced[frame] = r
        self._cache[frame] = None if is_identity(r) else r
        return self._cache[frame]

    def _fix_hint(self, frame: str) -> str:
        return self._no_tf + (
            f"no static transform {self._base} <- {frame} on {self._topic} yet; publish one (robot_state_publisher, "
            f"or `ros2 run tf2_ros static_transform_publisher --frame-id {self._base} --child-frame-id {frame} "
            "--qx .. --qy .. --qz .. --qw ..`), or set the parameter imu_to_body (quaternion x, y, z, w or a "
            "row-major 3x3 matrix, IMU -> body)"
        )

    def _unknown(self, frame: str) -> None:
        now = time.monotonic()
        since = self._unknown_since.setdefault(frame, now)
        self._drops.drop("imu_frame_unknown", self._fix_hint(frame))
        if now - since >= self._timeout and now - self._last_error >= _ERROR_PERIOD:
            self._last_error = now
            self._log.error(
                f"IMU frame still unknown after {now - since:.0f} s, dropping all IMU: {self._fix_hint(frame)}"
            )

    def _on_tf_static(self, msg) -> None:  # tf2_msgs/TFMessage (imported lazily)
        changed = False
        for t in msg.transforms:
            q, p = t.transform.rotation, t.transform.translation
            try:
                changed |= self._tree.add(t.header.frame_id, t.child_frame_id, (q.x, q.y, q.z, q.w), (p.x, p.y, p.z))
            except ValueError as exc:
                key = (t.header.frame_id, t.child_frame_id)
                if key not in self._bad_transforms:
                    self._bad_transforms.add(key)
                    self._log.warning(f"ignoring a static transform on {self._topic}: {exc}")
        if changed:
            # A re-published transform may change a rotation already in use: resolve those frames again.
            for frame in self._announced:
                self._cache.pop(frame, None)
