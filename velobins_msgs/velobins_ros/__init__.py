"""ROS 2 glue shared by the VeloBins nodes (installed with velobins_msgs, which they all depend on).

Only the thin-adapter side lives here: declaring parameters from a config dataclass, stamp
conversions, QoS profiles, and counting what a node drops. No algorithm lives here.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import rclpy
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

from velobins_common.fields import field_docs

T = TypeVar("T")

RELIABLE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
"""Estimates, odometry, paths (docs/design.md: reliable, depth 10)."""

LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""One-shot state such as the replay's finished flag: latched, so a late subscriber still gets it."""


def sensor_qos(depth: int) -> QoSProfile:
    """Sensor-data QoS (best effort, volatile) with a deeper queue, so bursts during fast replay fit."""
    qos = QoSProfile(
        **{k: getattr(qos_profile_sensor_data, k) for k in ("reliability", "durability", "history")}, depth=depth
    )
    return qos


def declare_config(node: Node, config: T, prefix: str = "", skip: tuple[str, ...] = ()) -> T:
    """Declare one ROS parameter per field of the dataclass ``config`` and return it filled from them.

    Defaults come from ``config`` (the core's dataclass: one source of truth), descriptions from
    the fields' docstrings. Tuples/lists become array parameters. The node's parameter file
    (``--params-file``) overrides the defaults; the filled dataclass validates itself on creation.
    """
    docs = field_docs(type(config))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name in skip or not f.init:
            continue
        default = getattr(config, f.name)
        if isinstance(default, tuple):
            default = list(default)
        name = prefix + f.name
        node.declare_parameter(name, default, ParameterDescriptor(description=docs.get(f.name, "")))
        value = node.get_parameter(name).value
        values[f.name] = tuple(value) if isinstance(getattr(config, f.name), tuple) else value
    return dataclasses.replace(config, **values)


def reject_runtime_changes(node: Node, names: set[str]) -> None:
    """Refuse run-time changes of parameters that are only read at start-up (instead of ignoring them)."""

    def check(params: list) -> SetParametersResult:
        for p in params:
            if p.name in names:
                return SetParametersResult(successful=False, reason=f"'{p.name}' is read at start-up only; restart")
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(check)


def stamp_to_sec(stamp) -> float:
    """builtin_interfaces/Time -> seconds (float)."""
    return stamp.sec + stamp.nanosec * 1e-9


def sec_to_stamp(t: float, stamp) -> Any:
    """Fill ``stamp`` (builtin_interfaces/Time) from seconds and return it."""
    ns = round(t * 1e9)
    stamp.sec, stamp.nanosec = divmod(ns, 1_000_000_000)
    return stamp


def set_xyz(msg: Any, values: Any) -> Any:
    """Set ``msg.x, msg.y, msg.z`` (Vector3, Point, ...) from three numbers; returns ``msg``."""
    msg.x, msg.y, msg.z = (float(v) for v in values)
    return msg


class DropCounter:
    """Counts rejected inputs by reason and logs a summary at most every ``period`` wall seconds.

    Every drop is counted (visible in the periodic log line and in ``counts``); nothing is dropped
    silently, and the log is throttled so a flood of bad samples cannot flood the console.
    """

    def __init__(self, node: Node, period: float = 5.0):
        self.node = node
        self.period = period
        self.counts: Counter[str] = Counter()
        self._logged: Counter[str] = Counter()
        self._last = 0.0

    def drop(self, reason: str, detail: str = "") -> None:
        self.counts[reason] += 1
        if self.counts[reason] == 1:
            self.node.get_logger().warning(f"dropping input: {reason}{': ' + detail if detail else ''}")
        self.maybe_log()

    def summary(self) -> str:
        """One line with every count so far (logged by the nodes when they stop)."""
        return f"dropped in total: {dict(sorted(self.counts.items())) or 'nothing'}"

    def maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last < self.period or self.counts == self._logged:
            return
        self._last = now
        new = {k: v - self._logged[k] for k, v in self.counts.items() if v != self._logged[k]}
        self._logged = self.counts.copy()
        self.node.get_logger().warning(
            f"dropped since last report: {dict(sorted(new.items()))}; total {sum(self.counts.values())}"
        )


def run_node(factory: Callable[[], Node], name: str, args: list[str] | None = None) -> None:
    """``main`` of a spinning node: init, build, spin until Ctrl-C / shutdown, log drops, clean up.

    A node that cannot start (bad checkpoint, invalid parameter) logs one fatal line with the reason
    and exits with status 1 instead of a traceback.
    """
    rclpy.init(args=args)
    node = None
    try:
        node = factory()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:
        if node is None:
            rclpy.logging.get_logger(name).fatal(f"cannot start: {exc}")
            raise SystemExit(1) from exc
        raise
    finally:
        if node is not None:
            drops = getattr(node, "drops", None)
            if drops is not None:
                node.get_logger().info(drops.summary())
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
