"""The odometry-out node: the EKF's ``nav_msgs/Odometry`` -> PX4 (``VehicleOdometry``) or mavros.

A thin adapter around :mod:`velobins_bridges.odom_out`: it reads the EKF's odometry
(``input_topic``), converts it (:func:`~velobins_bridges.odom_out.to_px4` for ``mode: px4``; for
``mode: mavros`` the frame ids only) and publishes it on ``output_topic`` (PX4's
``fmu/in/vehicle_visual_odometry`` or mavros' ``mavros/odometry/out`` by default). PX4's
``px4_msgs/msg/VehicleOdometry`` is resolved by name at start-up, so the package is needed only in
px4 mode; when it is missing the node logs one fatal line and exits with status 2. Odometry that
cannot be sent is counted by reason; ``/diagnostics`` reports the input and what went out.
docs/vehicles.md shows the autopilot side (EKF2 / ArduPilot parameters).
"""

from __future__ import annotations

import time
from typing import Any

from nav_msgs.msg import Odometry as OdometryMsg
from rclpy.node import Node

from velobins_common.health import CountDelta, RateMeter, Status
from velobins_ros import RELIABLE_QOS, DropCounter, declare_config, run_node, stamp_to_sec
from velobins_ros.health import Diagnostics, count_values, stream_values

from . import odom_out as core
from .messages import check_paths, message_class
from .status import bridge_status

NODE_NAME = "velobins_odom_out"
PX4_CONSTANTS = {
    "POSE_FRAME_NED": core.POSE_FRAME_NED,
    "POSE_FRAME_FRD": core.POSE_FRAME_FRD,
    "VELOCITY_FRAME_NED": core.VELOCITY_FRAME_NED,
    "VELOCITY_FRAME_FRD": core.VELOCITY_FRAME_FRD,
    "VELOCITY_FRAME_BODY_FRD": core.VELOCITY_FRAME_BODY_FRD,
}


def odometry_of(msg: Any) -> core.Odometry:
    """The plain :class:`~velobins_bridges.odom_out.Odometry` of a ``nav_msgs/Odometry``."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    return core.Odometry(
        stamp=stamp_to_sec(msg.header.stamp),
        position=(p.x, p.y, p.z),
        orientation=(q.x, q.y, q.z, q.w),
        linear=(v.x, v.y, v.z),
        angular=(w.x, w.y, w.z),
        pose_covariance=tuple(float(c) for c in msg.pose.covariance),
        twist_covariance=tuple(float(c) for c in msg.twist.covariance),
    )


def check_px4_type(cls: type, type_name: str) -> None:
    """Refuse a PX4 message whose fields or frame constants differ from what the core fills."""
    check_paths(cls(), type_name, [("px4_type", name) for name in core.Px4Odometry.__dataclass_fields__])
    for name, value in PX4_CONSTANTS.items():
        if getattr(cls, name, value) != value:
            raise ValueError(f"'px4_type' {type_name}: {name} is {getattr(cls, name)}, expected {value}")


def fill_px4(msg: Any, odom: core.Px4Odometry) -> Any:
    """Copy ``odom`` into a ``VehicleOdometry`` instance (arrays as float lists) and return it."""
    for name in core.Px4Odometry.__dataclass_fields__:
        value = getattr(odom, name)
        setattr(msg, name, [float(v) for v in value] if isinstance(value, tuple) else value)
    return msg


class OdomOutNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.published = 0
        self.config = declare_config(self, core.OdomOutConfig())
        cfg = self.config
        if cfg.mode == "px4":
            self.out_cls = message_class(cfg.px4_type, "px4_type")
            check_px4_type(self.out_cls, cfg.px4_type)
        else:
            self.out_cls = OdometryMsg
        self.throttle = core.Throttle(cfg.max_rate)
        self.drops = DropCounter(self)
        self.meter, self._new_drops = RateMeter(), CountDelta()
        self.pub = self.create_publisher(self.out_cls, cfg.topic, RELIABLE_QOS)
        self.sub = self.create_subscription(OdometryMsg, cfg.input_topic, self.on_odometry, RELIABLE_QOS)
        self.create_timer(5.0, self.drops.maybe_log)
        self.diagnostics = Diagnostics(
            self, f"odometry out ({cfg.mode})", cfg.child_frame_id, cfg.diagnostics_period, self.health
        )
        what = (
            f"{cfg.px4_type} (pose {cfg.pose_frame.upper()}, velocity {cfg.velocity_frame})"
            if cfg.mode == "px4"
            else f"nav_msgs/Odometry ({cfg.frame_id} -> {cfg.child_frame_id})"
        )
        self.get_logger().info(f"odometry {self.sub.topic_name} -> {what} on {self.pub.topic_name}")

    def on_odometry(self, msg: Any) -> None:
        self.meter.tick(time.monotonic())
        odom = odometry_of(msg)
        bad = core.check(odom)
        if bad is not None:
            self.drops.drop(bad.reason, bad.detail)
            return
        if not self.throttle.accept(odom.stamp):
            return
        if self.config.mode == "px4":
            now = self.get_clock().now().nanoseconds * 1e-9
            out = fill_px4(self.out_cls(), core.to_px4(odom, self.config, now, self.throttle.resets))
        else:
            out = msg
            out.header.frame_id = self.config.frame_id
            out.child_frame_id = self.config.child_frame_id
        self.pub.publish(out)
        self.published += 1

    def health(self, now: float) -> Status:
        """The bridge's state for /diagnostics (:func:`velobins_bridges.status.bridge_status`)."""
        cfg = self.config
        drops = self._new_drops.since(self.drops.counts)
        status = bridge_status("odometry", self.sub.topic_name, self.meter.age(now), cfg.input_timeout, drops)
        values = stream_values(now, {"odometry input": self.meter})
        values["published"] = str(self.published)
        values["filter restarts (reset_counter)"] = str(self.throttle.resets)
        values.update(count_values("dropped", self.drops.counts))
        return Status(status.level, status.message, values)

    def destroy_node(self) -> None:
        if hasattr(self, "throttle"):  # not when start-up failed (rclpy still destroys the node)
            self.get_logger().info(f"published {self.published} odometry messages ({self.config.mode})")
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    run_node(OdomOutNode, NODE_NAME, args)


if __name__ == "__main__":
    main()
