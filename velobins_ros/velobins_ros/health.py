"""ROS side of the nodes' health: ``/diagnostics`` publishing and the throttled silence warning.

What the state is lives in :mod:`velobins_common.health` (pure, tested without ROS); this module
turns a :class:`~velobins_common.health.Status` into ``diagnostic_msgs/DiagnosticArray`` on the
absolute topic ``/diagnostics`` (the diagnostics aggregator's, whatever the node's namespace), on a
steady-clock timer so the heartbeat goes on when a simulated ``/clock`` stops. :class:`NodeHealth`
is the scaffolding every node shares around it: input meters, new drops, the age of the last output
and the silence warning, with its live parameters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from velobins_common.health import LEVEL_NAMES, OK, CountDelta, RateMeter, SilenceAlarm, Status

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
        startup_grace: seconds after the start during which, until the first OK, the changes of level
            are logged at INFO (a healthy start waits for its inputs and prints no WARN); a node not OK
            by then says so once at WARN, and from the first OK on every change to a problem is a WARN.
            /diagnostics carries the true level from the start. 0: WARN from the start.
    """

    def __init__(
        self,
        node: Node,
        what: str,
        hardware_id: str,
        period: float,
        decide: Callable[[float], Status],
        startup_grace: float = 0.0,
    ) -> None:
        self.node = node
        self.name = f"{node.get_fully_qualified_name()}: {what}"
        self.hardware_id = hardware_id
        self.decide = decide
        self.last: Status | None = None
        self.startup_grace = startup_grace
        self._started = time.monotonic()
        self._ok_seen = False
        self._late_said = False
        self._pub = node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, DIAGNOSTICS_QOS)
        self._timer = node.create_timer(period, self.publish, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def starting(self, now: float) -> bool:
        """True while the node is in its start-up grace: not OK yet, less than ``startup_grace`` s in."""
        return not self._ok_seen and now - self._started < self.startup_grace

    def publish(self) -> None:
        """Decide the state now and publish it (also logs each change of level)."""
        now = time.monotonic()
        status = self.decide(now)
        starting = self.starting(now)
        self._ok_seen = self._ok_seen or status.level == OK
        if self.last is None or status.level != self.last.level:
            text = f"health {LEVEL_NAMES[status.level]}: {status.message}"
            if status.level == OK or starting:  # one severity per call site (rclpy refuses a change)
                self.node.get_logger().info(text)
            else:
                self.node.get_logger().warning(text)
        elif not self._ok_seen and not starting and not self._late_said and self.startup_grace > 0:
            self.node.get_logger().warning(
                f"health {LEVEL_NAMES[status.level]} {self.startup_grace:g} s after the start: {status.message}"
            )
        if not starting:
            self._late_said = True
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


class NodeHealth:
    """The health scaffolding of a node: its input meters, what it dropped since the last status, the
    age of its last output, the throttled "no output for X s" warning, and the /diagnostics timer.

    Args:
        node: the node.
        what: the status name after the node's name ("EKF", "velocity network").
        hardware_id: the vehicle's body frame.
        period: seconds between /diagnostics messages (steady clock).
        decide: ``(now, new drops by reason) -> Status``, the node's decision (its pure status function);
            the key-values of :meth:`values` are added to it.
        meters: input label -> its :class:`RateMeter`.
        silence_after: seconds without output while the first input arrives before the warning
            (live: :meth:`set_silence_after`).
        output: what the node outputs, for the warning ("odometry", "velocity estimate").
        startup_grace: see :class:`Diagnostics`; the silence warning waits for it too.
    """

    def __init__(
        self,
        node: Node,
        what: str,
        hardware_id: str,
        period: float,
        decide: Callable[[float, dict[str, int]], Status],
        meters: Mapping[str, RateMeter],
        silence_after: float,
        output: str,
        startup_grace: float = 0.0,
    ) -> None:
        self.node, self.meters, self.output = node, dict(meters), output
        self.last_output: float | None = None
        self._decide = decide
        self._new_drops = CountDelta()
        self._alarm = SilenceAlarm(silence_after)
        self.drop_counts: Callable[[], Mapping[str, int]] = dict
        self.extra_values: Callable[[float], dict[str, str]] = lambda now: {}
        self.diagnostics = Diagnostics(node, what, hardware_id, period, self.status, startup_grace)

    def set_silence_after(self, seconds: float) -> None:
        """A live change of the node's ``silence_warn_after``."""
        self._alarm.after = seconds

    def mark_output(self) -> None:
        """The node just published its output."""
        self.last_output = time.monotonic()

    def silence(self, now: float) -> float | None:
        """Seconds without output, counted from the first input of the first meter while none went out."""
        first = next(iter(self.meters.values())).first
        return SilenceAlarm.silence(now, self.last_output, first)

    def check_silence(self, timeout: float, cause: Callable[[float], str]) -> None:
        """Log a throttled WARN naming ``cause(now)`` when no output went out for ``silence_after`` s."""
        now = time.monotonic()
        silence = self.silence(now)
        if not self.diagnostics.starting(now) and self._alarm.due(now, silence, 0.0, timeout):
            first = next(iter(self.meters))
            self.node.get_logger().warning(f"no {self.output} for {silence:.1f} s while {first} arrives: {cause(now)}")

    def status(self, now: float) -> Status:
        """The node's decision now, with the meters' rates and ages, the output age and the drop counts."""
        counts = dict(self.drop_counts())
        status = self._decide(now, self._new_drops.since(counts))
        values = stream_values(now, self.meters)
        values[f"last {self.output} age [s]"] = "never" if self.last_output is None else f"{now - self.last_output:.3f}"
        values.update(self.extra_values(now))
        values.update(count_values("dropped", counts))
        return Status(status.level, status.message, {**values, **status.values})
