"""The IMU bridge node: an autopilot's IMU message -> ``imu`` (``sensor_msgs/Imu``, SI, body FLU).

A thin adapter around :class:`velobins_bridges.imu.ImuConverter`: it resolves the input message
type by name at start-up (``input_type``, e.g. ``px4_msgs/msg/SensorCombined``), subscribes to
``input_topic`` and publishes each converted message on ``output_topic`` in the body frame
(``frame_prefix + frame_id``), orientation marked unknown (REP-145). Every message it cannot convert
is counted by reason (DropCounter) and logged, throttled; ``/diagnostics`` reports the input rate,
the drops and the mean specific force (a unit check: it reads g at rest).

When the input's message package is not installed, the node logs one fatal line naming the
package and how to install it, and exits with status 2 (cannot start). Presets: velobins_bringup/config/imu_bridge/;
docs/imu_bridge.md.
"""

from __future__ import annotations

import time
from typing import Any

from rclpy.node import Node
from sensor_msgs.msg import Imu

from velobins_common.health import CountDelta, RateMeter, Status
from velobins_ros import DropCounter, declare_config, run_node, sec_to_stamp, sensor_qos, set_xyz
from velobins_ros.health import Diagnostics, count_values, stream_values

from .imu import ForceMeter, ImuBridgeConfig, ImuConverter, ImuSample, force_problem
from .messages import Drop, message_class
from .status import bridge_status

NODE_NAME = "velobins_imu_bridge"


class ImuBridgeNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.published = 0
        self.config = declare_config(self, ImuBridgeConfig())
        cfg = self.config
        msg_cls = message_class(cfg.input_type)
        self.converter = ImuConverter(cfg)
        self.converter.check_type(msg_cls())
        self.drops = DropCounter(self)
        self.meter, self.force, self._new_drops = RateMeter(), ForceMeter(), CountDelta()
        self.pub = self.create_publisher(Imu, cfg.output_topic, sensor_qos(10))
        self.sub = self.create_subscription(
            msg_cls, cfg.input_topic, self.on_message, sensor_qos(cfg.input_queue_depth)
        )
        self.create_timer(5.0, self.drops.maybe_log)
        self.diagnostics = Diagnostics(self, "IMU bridge", cfg.output_frame, cfg.diagnostics_period, self.health)
        self.get_logger().info(
            f"{cfg.input_type} {self.sub.topic_name} [acc {cfg.acc_field} in {cfg.acc_unit}, gyro {cfg.gyro_field} "
            f"in {cfg.gyro_unit}, {cfg.axes.upper()}] -> Imu {self.pub.topic_name} (frame '{cfg.output_frame}', "
            f"stamp from {cfg.stamp_source})"
        )

    def on_message(self, msg: Any) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        self.meter.tick(time.monotonic())
        result = self.converter.convert(msg, now)
        if isinstance(result, Drop):
            self.drops.drop(result.reason, result.detail)
            return
        self.force.add(result.acc)
        self.publish(result)

    def publish(self, sample: ImuSample) -> None:
        out = Imu()
        sec_to_stamp(sample.stamp, out.header.stamp)
        out.header.frame_id = self.config.output_frame
        out.orientation.w = 1.0
        out.orientation_covariance[0] = -1.0  # REP-145: no orientation estimate
        set_xyz(out.linear_acceleration, sample.acc)
        set_xyz(out.angular_velocity, sample.gyro)
        self.pub.publish(out)
        self.published += 1

    def health(self, now: float) -> Status:
        """The bridge's state for /diagnostics (decided by :func:`velobins_bridges.status.bridge_status`)."""
        cfg = self.config
        mean_force = self.force.mean()
        drops = self._new_drops.since(self.drops.counts)
        age = self.meter.age(now)
        status = bridge_status(
            "IMU input", self.sub.topic_name, age, cfg.input_timeout, drops, force_problem(mean_force)
        )
        values = stream_values(now, {"IMU input": self.meter})
        values["IMU published"] = str(self.published)
        values["mean |specific force| [m/s²]"] = "n/a" if mean_force is None else f"{mean_force:.3f}"
        values.update(count_values("dropped", self.drops.counts))
        return Status(status.level, status.message, values)

    def destroy_node(self) -> None:
        if hasattr(self, "converter"):  # not when start-up failed (rclpy still destroys the node)
            self.get_logger().info(f"published {self.published} Imu")
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    run_node(ImuBridgeNode, NODE_NAME, args)


if __name__ == "__main__":
    main()
