"""The rotor bridge node: an autopilot's or simulator's per-rotor message -> ``rotor_speeds``.

A thin adapter around :class:`velobins_bridges.rotor.RotorConverter`: it resolves the input
message type by name at start-up (``input_type``, e.g. ``mavros_msgs/msg/ESCStatus``), subscribes
to ``input_topic``, and publishes each converted message as ``velobins_msgs/RotorSpeeds`` on
``output_topic``. Every message it cannot convert is counted by reason (DropCounter) and logged,
throttled. With ``hold_rate`` > 0 the last values are republished restamped between slow telemetry
samples, for at most ``max_hold_age`` seconds (:class:`velobins_bridges.rotor.HoldLast`).

When the input's message package is not installed, the node logs one fatal line naming the
package and how to install it, and exits with status 2 (cannot start). Presets: velobins_bringup/config/rotor_bridge/;
docs/rotor_bridge.md.
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node

from velobins_msgs.msg import RotorSpeeds
from velobins_ros import DropCounter, declare_config, run_node, sec_to_stamp, sensor_qos

from .messages import Drop, message_class
from .rotor import BridgeConfig, HoldLast, RotorConverter, Sample

NODE_NAME = "velobins_rotor_bridge"


class RotorBridgeNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.published = 0
        self.config = declare_config(self, BridgeConfig())
        cfg = self.config
        msg_cls = message_class(cfg.input_type)
        self.converter = RotorConverter(cfg)
        self.converter.check_type(msg_cls())
        self.hold = HoldLast(cfg.hold_rate, cfg.max_hold_age)
        self.drops = DropCounter(self)
        self.pub = self.create_publisher(RotorSpeeds, cfg.output_topic, sensor_qos(10))
        self.create_subscription(msg_cls, cfg.input_topic, self.on_message, sensor_qos(cfg.input_queue_depth))
        if self.hold.enabled:
            self.create_timer(self.hold.period, self.on_hold_timer)
        self.create_timer(5.0, self.drops.maybe_log)
        hold = f"hold-last at {cfg.hold_rate:g} Hz for <= {cfg.max_hold_age:g} s" if self.hold.enabled else "no hold"
        self.get_logger().info(
            f"{cfg.input_type} {self.resolve_topic_name(cfg.input_topic)} [{cfg.field}] -> "
            f"RotorSpeeds {self.resolve_topic_name(cfg.output_topic)} ({cfg.num_rotors} rotors, {cfg.kind}, "
            f"x{cfg.scale:g}{cfg.offset:+g}, sign {cfg.sign}); {hold}"
        )

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def on_message(self, msg: Any) -> None:
        now = self._now()
        result = self.converter.convert(msg, now)
        if isinstance(result, Drop):
            self.drops.drop(result.reason, result.detail)
            return
        out = self.hold.on_sample(result, now)
        if out is not None:  # None: stamped before the last held sample; the next tick carries it
            self.publish(out)

    def on_hold_timer(self) -> None:
        held = self.hold.tick(self._now())
        if held is not None:
            self.publish(held)

    def destroy_node(self) -> None:
        hold = getattr(self, "hold", None)  # None when start-up failed (rclpy still destroys the node)
        if hold is not None:
            extra = f" (held {hold.held}, late samples carried on {hold.merged})" if hold.enabled else ""
            self.get_logger().info(f"published {self.published} RotorSpeeds{extra}")
        super().destroy_node()

    def publish(self, sample: Sample) -> None:
        out = RotorSpeeds()
        sec_to_stamp(sample.stamp, out.header.stamp)
        out.header.frame_id = self.config.frame_id
        out.kind = self.converter.kind_index
        out.speeds = list(sample.speeds)
        self.pub.publish(out)
        self.published += 1


def main(args: list[str] | None = None) -> None:
    run_node(RotorBridgeNode, NODE_NAME, args)


if __name__ == "__main__":
    main()
