"""ROS side of the nodes' health: ``/diagnostics`` publishing and the throttled silence warning.

What the state is lives in :mod:`velobins_common.health` (pure, tested without ROS); this module
only turns a :class:`~velobins_common.health.Status` into ``diagnostic_msgs/DiagnosticArray`` on
the absolute topic ``/diagnostics`` (the diagnostics aggregator's, whatever the node's namespace),
on a steady-clock timer so the heartbeat goes on when a simulated ``/clock`` stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from velobins_common.health import LEVEL_NAMES, OK, RateMeter, Status

DIAGNOSTICS_TOPIC = "/diagnostics"
DIAGNOSTICS_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
"""As diagnostic_updater publishes (reliable, depth 10)."""


class Diagnostics:
    """Publishes ``decide(now)`` every ``period`` seconds as one status named ``<node fqn>: <what>``.

    Args:
        node: the publishing node.
        what: the part of the status name after the node's fully-qualified name.
        hardware_id: the ``hardware_id`` of the status (the vehicle's body frame).
        period: seconds between publications (steady clock).
        decide: ``time.monotonic()`` → the current :class:`Status`.
    """

    def __init__(
        self, node: Node, what: str, hardware_id: str, period: float, decide: Callable[[float], Status]
    ) -> None:
        self.node = node
        self.name = f"{node.get_fully_qualified_name()}: {what}"
        self.hardware_id = hardware_id
        self.decide = decide
        self.last: Status | None = None
        self._pub = node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, DIAGNOSTICS_QOS)
        self._timer = node.create_timer(period, self.publish, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def publish(self) -> None:
        """Decide the state now and publish it (also logs each change of level)."""
        status = self.decide(time.monotonic())
        if self.last is None or status.level != self.last.level:
            text = f"health {LEVEL_NAMES[status.level]}: {status.message}"
            if status.level == OK:  # one severity per call site (rclpy refuses a change)
                self.node.get_logger().info(text)
            else:
                self.node.get_logger().warning(text)
        self.last = status
        msg = DiagnosticArray()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.status = [
            DiagnosticStatus(
                level=bytes([status.level]),
                name=self.name,
                message=status.message,
                hardware_id=self.hardware_id,
                values=[KeyValue(key=k, value=v) for k, v in status.values.items()],
            )
        ]
        self._pub.publish(msg)


def stream_values(now: float, meters: Mapping[str, RateMeter]) -> dict[str, str]:
    """Key-values of input streams: rate [Hz] and age of the last message [s], per label."""
    out: dict[str, str] = {}
    for label, meter in meters.items():
        age = meter.age(now)
        out[f"{label} rate [Hz]"] = f"{meter.rate(now):.1f}"
        out[f"{label} age [s]"] = "never" if age is None else f"{age:.3f}"
    return out


def count_values(prefix: str, counts: Mapping[str, int]) -> dict[str, str]:
    """Key-values ``<prefix> <reason>`` of non-zero counts (drops by reason, predictor outcomes)."""
    return {f"{prefix} {k}": str(v) for k, v in sorted(counts.items()) if v}
