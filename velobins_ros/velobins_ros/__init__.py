"""ROS 2 glue shared by the VeloBins nodes (installed with velobins_msgs, which they all depend on).

Only the thin-adapter side lives here: declaring parameters from a config dataclass, stamp
conversions, QoS profiles, and counting what a node drops. No algorithm lives here.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
import typing
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import rclpy
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.signals import SignalHandlerOptions

from velobins_common.fields import ParamSpec, coerce_value, field_docs, param_spec

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


_FLOAT_LIMIT = 1.7976931348623157e308
_INT_LIMIT = 2**63 - 1


def _descriptor(spec: ParamSpec, kind: Any, description: str, read_only: bool) -> ParameterDescriptor:
    """Descriptor of one config field: its doc, its range (``ros2 param describe``), read-only or not.

    Typing is dynamic so that an int given for a float (``odom_rate:=50``) is accepted; the type
    and range are checked by :func:`velobins_common.fields.coerce_value` instead, for every reader.
    """
    d = ParameterDescriptor(
        description=description,
        additional_constraints=spec.describe(),
        read_only=read_only,
        dynamic_typing=True,
    )
    if spec.min is not None or spec.max is not None:
        if kind is int:
            lo = -_INT_LIMIT if spec.min is None else int(spec.min)
            hi = _INT_LIMIT if spec.max is None else int(spec.max)
            d.integer_range = [IntegerRange(from_value=lo, to_value=hi, step=0)]
        elif kind is float:
            lo = -_FLOAT_LIMIT if spec.min is None else float(spec.min)
            hi = _FLOAT_LIMIT if spec.max is None else float(spec.max)
            d.floating_point_range = [FloatingPointRange(from_value=lo, to_value=hi, step=0.0)]
    return d


def declare_config(
    node: Node,
    config: T,
    prefix: str = "",
    skip: tuple[str, ...] = (),
    on_change: Callable[[T], None] | None = None,
) -> T:
    """Declare one ROS parameter per field of the dataclass ``config`` and return it filled from them.

    Defaults come from ``config`` (the core's dataclass: one source of truth), descriptions, ranges
    and the live flag from the fields (:func:`velobins_common.fields.param`). Tuples become array
    parameters. The parameter files (``--params-file``) override the defaults; every value is
    checked (type, range, choices) with an error naming the parameter, and the filled dataclass
    validates itself on creation.

    Fields marked ``live`` can be changed at run time when ``on_change`` is given: a change is
    checked like a start-up value and, once accepted, ``on_change`` receives the new dataclass.
    Every other parameter is declared read-only (a change needs a restart, and ``ros2 param set``
    says so).
    """
    cls = type(config)
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    by_param: dict[str, dataclasses.Field] = {}
    for f in dataclasses.fields(config):
        if f.name in skip or not f.init:
            continue
        spec = param_spec(f)
        default = getattr(config, f.name)
        if isinstance(default, tuple):
            default = list(default)
        name = prefix + f.name
        kind = hints[f.name]
        descriptor = _descriptor(spec, kind, docs.get(f.name, ""), read_only=not (spec.live and on_change))
        # Declared without its range first, so that a bad start value gets our message (naming the
        # parameter and the bound) rather than rclpy's; the range is attached once it is checked.
        # (read-only is attached last as well: rclpy refuses to change a read-only descriptor.)
        plain = ParameterDescriptor(description=descriptor.description, dynamic_typing=True)
        node.declare_parameter(name, default, plain)
        values[f.name] = coerce_value(cls, f.name, node.get_parameter(name).value, label=name)
        node.set_descriptor(name, descriptor)
        by_param[name] = f
    try:
        current = dataclasses.replace(config, **values)
    except ValueError as exc:
        raise ValueError(f"{node.get_name()} parameters{' ' + prefix.rstrip('.') if prefix else ''}: {exc}") from None
    if on_change is not None:
        _watch_config(node, current, by_param, on_change)
    return current


def _watch_config(node: Node, current: Any, by_param: dict[str, dataclasses.Field], on_change: Callable) -> None:
    """Check run-time changes of ``current``'s live fields and hand the accepted config to ``on_change``."""
    state = {"config": current, "pending": None}
    cls = type(current)

    def changed(params: list) -> dict[str, Any]:
        out = {}
        for p in params:
            f = by_param.get(p.name)
            if f is None:
                continue
            if not param_spec(f).live:
                raise ValueError(f"'{p.name}' is read at start-up only; restart the node to change it")
            out[f.name] = coerce_value(cls, f.name, p.value, label=p.name)
        return out

    def check(params: list) -> SetParametersResult:
        try:
            changes = changed(params)
            state["pending"] = dataclasses.replace(state["config"], **changes) if changes else None
        except ValueError as exc:
            state["pending"] = None
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def apply(params: list) -> None:
        new = state["pending"]
        if new is None or not any(p.name in by_param for p in params):
            return
        state["config"], state["pending"] = new, None
        on_change(new)
        node.get_logger().info("parameters changed: " + ", ".join(f"{p.name}={p.value!r}" for p in params))

    node.add_on_set_parameters_callback(check)
    node.add_post_set_parameters_callback(apply)


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
    ``quiet`` (optional, settable later) says when drops are expected, e.g. during a node's start-up
    grace (the network's first estimate may predate the filter's start): they are then logged at
    INFO, still counted and shown in the diagnostics, so a healthy start prints no WARN.
    ``extra`` (optional, settable later) adds counts kept elsewhere (the EKF's filter refusals) to
    :meth:`summary`, the line a node logs when it stops.
    """

    def __init__(self, node: Node, period: float = 5.0, quiet: Callable[[], bool] | None = None):
        self.node = node
        self.period = period
        self.quiet = quiet
        self.extra: Callable[[], Mapping[str, int]] | None = None
        self.counts: Counter[str] = Counter()
        self._logged: Counter[str] = Counter()
        self._last = 0.0

    def drop(self, reason: str, detail: str = "") -> None:
        self.counts[reason] += 1
        if self.counts[reason] == 1:
            self._say(f"dropping input: {reason}{': ' + detail if detail else ''}")
        self.maybe_log()

    def _say(self, text: str) -> None:
        """Log ``text`` at INFO while ``quiet()``, else at WARN."""
        # Two call sites on purpose: rclpy raises ValueError when one call site changes its severity
        # (CallerId is file, function and line), which killed the EKF node mid-run once the grace ended.
        if self.quiet is not None and self.quiet():
            self.node.get_logger().info(text)
        else:
            self.node.get_logger().warning(text)

    def summary(self) -> str:
        """One line with every count so far (logged by the nodes when they stop)."""
        counts = {**self.counts, **(self.extra() if self.extra is not None else {})}
        return f"dropped in total: {dict(sorted((k, v) for k, v in counts.items() if v)) or 'nothing'}"

    def maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last < self.period or self.counts == self._logged:
            return
        self._last = now
        new = {k: v - self._logged[k] for k, v in self.counts.items() if v != self._logged[k]}
        self._logged = self.counts.copy()
        self._say(f"dropped since last report: {dict(sorted(new.items()))}; total {sum(self.counts.values())}")


CANNOT_START = 2
"""Exit status of a node that cannot start (bad checkpoint, invalid parameter): a user error, as
everywhere in VeloBins, and distinct from a crash (1) or a signal, so the launch files never
respawn a node that would only fail again (velobins_bringup.supervision)."""

_STOP = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    """First SIGINT/SIGTERM: ask the spin loop to stop (checked between callbacks, never raised
    inside one: an exception raised while rclpy converts a message surfaces as a RuntimeError).
    A second signal forces the way out."""
    if _STOP.is_set():
        raise KeyboardInterrupt
    _STOP.set()


def running() -> bool:
    """False once the node was asked to stop (SIGINT/SIGTERM) or the context shut down: the loop
    condition of every spin loop of a :func:`run_node` node."""
    return not _STOP.is_set() and rclpy.ok()


def _spin(node: Node) -> None:
    """``rclpy.spin`` that returns when :func:`running` turns False (checked every 0.1 s)."""
    while running():
        rclpy.spin_once(node, timeout_sec=0.1)


def run_node(
    factory: Callable[[], Node],
    name: str,
    args: list[str] | None = None,
    spin: Callable[[Any], None] | None = None,
    on_stop: Callable[[Any], None] | None = None,
) -> None:
    """``main`` of a spinning node: init, build, spin until Ctrl-C / shutdown, log drops, clean up.

    A node that cannot start (bad checkpoint, invalid parameter) logs one fatal line with the reason
    and exits with status :data:`CANNOT_START` (2) instead of a traceback.

    rclpy's own signal handler is off: it shuts the context down on SIGINT before the node can log
    its drop summary, which then fails with "Failed to publish log message to rosout". Here SIGINT
    (Ctrl-C, ``ros2 launch`` stopping) and SIGTERM end the spin loop between callbacks
    (:func:`running`), so the summary goes out on a live context and the node then shuts down in
    order.

    ``spin(node)`` replaces ``rclpy.spin`` for nodes that end by themselves (replay, eval);
    ``on_stop(node)`` runs before the node is destroyed, also after Ctrl-C (e.g. write the report).
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    node = None
    try:
        node = factory()
        (spin or _spin)(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:
        if node is None:
            rclpy.logging.get_logger(name).fatal(f"cannot start: {exc}")
            raise SystemExit(CANNOT_START) from exc
        raise
    finally:
        if node is not None:
            if on_stop is not None:
                on_stop(node)
            drops = getattr(node, "drops", None)
            if drops is not None:
                node.get_logger().info(drops.summary())
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


def executable(package: str, name: str) -> Path:
    """Installed node executable (``lib/<package>/<name>``, where ``ros2 run`` looks)."""
    from ament_index_python.packages import get_package_prefix

    path = Path(get_package_prefix(package)) / "lib" / package / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: node executable missing (build the workspace: scripts/bootstrap.sh)")
    return path
