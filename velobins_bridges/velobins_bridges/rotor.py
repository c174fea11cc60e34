"""Conversion core of the rotor bridge: any message with per-rotor values -> rotor speeds.

Autopilots and simulators publish per-rotor signals in their own messages (mavros ``ESCStatus`` /
``ESCTelemetry``, px4_msgs ``EscStatus`` / ``ActuatorMotors``, ``sensor_msgs/JointState``,
Crazyswarm2 ``LogDataGeneric``). The network node reads only ``velobins_msgs/RotorSpeeds``; the
bridge node (``rotor_node.py``, a thin adapter) feeds each incoming message to
:class:`RotorConverter` here and publishes what it returns. Nothing here imports rclpy or a message
package: a message is any object with attribute access, so the core is tested with stand-ins.

Per message, in this order (docs/rotor_bridge.md):

1. **extract** the raw values along ``field`` (``velocity``, ``control``, ``esc_status[].rpm``:
   ``[]`` walks a list of sub-messages);
2. **select and order**: output rotor *i* is input index ``motor_order[i]``, or the entry whose name
   (``names_field``) is ``joint_names[i]``;
3. **NaN**: ``nan: zero`` takes a NaN as a stopped motor (px4 ``ActuatorMotors``: NaN = disarmed),
   ``nan: drop`` drops the message;
4. **sign** of the raw value: ``abs`` (reversed motors report negative RPM; RotorSpeeds carries
   magnitudes), ``keep``, or ``drop_negative`` (drop the message);
5. **scale**: ``value * scale + offset`` (e.g. 16-bit PWM: scale 1/65535);
6. **clamp** to [0, 1] when the kind is ``normalized`` and ``clamp_normalized`` is set.

Slow telemetry (ESC RPM at ~10 Hz) would leave the network node's ``max_rotor_age`` check without
a fresh sample for most windows. :class:`HoldLast` optionally republishes the last converted values
at ``hold_rate`` restamped to the current time, for at most ``max_hold_age`` seconds after the last
real sample; after that nothing goes out, so the network node sees the stream as stale instead of
flying on a frozen value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from velobins_common.fields import param

from .messages import STAMP_SOURCES, Drop, check_paths, message_stamp, parse_path, parse_type_name, resolve, stamp_paths

KINDS = ("rad_per_sec", "rpm", "normalized")
"""Output kinds, in the order of RotorSpeeds' KIND_* constants (0, 1, 2)."""
SIGN_MODES = ("abs", "keep", "drop_negative")
NAN_MODES = ("drop", "zero")


@dataclass(frozen=True)
class BridgeConfig:
    """Parameters of the rotor bridge (node ``velobins_rotor_bridge``; presets in
    velobins_bringup/config/rotor_bridge/)."""

    input_type: str = param("sensor_msgs/msg/JointState", live=False)
    """Input message type as ``<package>/msg/<Type>``, resolved at start-up."""
    input_topic: str = param("joint_states", live=False)
    """Input topic (relative, so it follows the node's namespace)."""
    output_topic: str = param("rotor_speeds", live=False)
    """Output velobins_msgs/RotorSpeeds topic (relative)."""
    frame_id: str = param("base_link", live=False)
    """header.frame_id of the published RotorSpeeds."""
    field: str = param("velocity", live=False)
    """Path to the per-rotor values: ``a.b`` for sub-fields, ``list[].x`` through a list of sub-messages."""
    kind: str = param("rad_per_sec", choices=KINDS, live=False)
    """Unit of the values after scaling: rad_per_sec, rpm, or normalized (0 = stopped, 1 = full)."""
    scale: float = param(1.0, live=False)
    """Factor applied to each raw value (after sign handling): value * scale + offset."""
    offset: float = param(0.0, live=False)
    """Offset added after scaling: value * scale + offset."""
    sign: str = param("abs", choices=SIGN_MODES, live=False)
    """Negative raw values: abs (make positive), keep, or drop_negative (drop the message)."""
    nan: str = param("drop", choices=NAN_MODES, live=False)
    """NaN raw values: drop the message, or zero (a stopped motor; px4 ActuatorMotors' disarmed)."""
    clamp_normalized: bool = param(True, live=False)
    """Clamp normalized values to [0, 1] (idle offsets, command overshoot)."""
    num_rotors: int = param(4, min=1, max=16, live=False)
    """Number of rotors published."""
    motor_order: tuple[int, ...] = param((), live=False)
    """Output rotor i takes input index motor_order[i] (0-based); empty: 0 .. num_rotors-1."""
    joint_names: tuple[str, ...] = param((), live=False)
    """Select and order the values by name (JointState): output i is the entry named joint_names[i]."""
    names_field: str = param("name", live=False)
    """Path to the names list matched against joint_names."""
    count_field: str = param("", live=False)
    """Optional path to an integer giving how many entries are valid (px4 EscStatus.esc_count)."""
    stamp_source: str = param("header", choices=STAMP_SOURCES, live=False)
    """Output stamp: header (header.stamp), receive (node clock on arrival) or field (stamp_field)."""
    stamp_field: str = param("timestamp", live=False)
    """Path to a numeric time field, used when stamp_source is field."""
    stamp_field_scale: float = param(1.0e-6, min=0.0, live=False)
    """Seconds per unit of stamp_field (px4 timestamps are microseconds: 1e-6)."""
    hold_rate: float = param(0.0, min=0.0, max=1000.0, live=False)
    """Republish the last values at this rate [Hz] while no new sample arrives; 0 disables hold-last."""
    max_hold_age: float = param(0.25, min=0.0, max=10.0, live=False)
    """Hold-last stops this long [s] after the last real sample, so a dead stream is seen as stale."""
    input_queue_depth: int = param(50, min=1, max=10000, live=False)
    """Queue depth of the input subscription."""

    def __post_init__(self) -> None:
        parse_type_name(self.input_type)
        parse_path(self.field)
        if self.joint_names:
            parse_path(self.names_field)
        if self.count_field:
            parse_path(self.count_field)
        if self.stamp_source == "field":
            parse_path(self.stamp_field)
        if self.motor_order and self.joint_names:
            raise ValueError("give either 'motor_order' or 'joint_names', not both")
        for name, seq in (("motor_order", self.motor_order), ("joint_names", self.joint_names)):
            if seq and len(seq) != self.num_rotors:
                raise ValueError(f"'{name}' has {len(seq)} entries, 'num_rotors' is {self.num_rotors}")
            if len(set(seq)) != len(seq):
                raise ValueError(f"'{name}' names an input twice: {list(seq)}")
        if any(i < 0 for i in self.motor_order):
            raise ValueError(f"'motor_order' indices are 0-based and >= 0, got {list(self.motor_order)}")
        if not math.isfinite(self.scale) or not math.isfinite(self.offset):
            raise ValueError("'scale' and 'offset' must be finite")

    @property
    def order(self) -> tuple[int, ...]:
        """Input index of each output rotor (ignoring joint_names)."""
        return self.motor_order or tuple(range(self.num_rotors))


class Sample(NamedTuple):
    """A converted sample: stamp [s] and one value per rotor in the vehicle's motor order."""

    stamp: float
    speeds: tuple[float, ...]


class RotorConverter:
    """Turns one input message into a :class:`Sample` or a :class:`Drop` (see the module docstring)."""

    def __init__(self, config: BridgeConfig) -> None:
        self.config = config
        self.kind_index = KINDS.index(config.kind)
        self._order = config.order

    def check_type(self, example: Any) -> None:
        """Fail at start-up when the paths do not exist on ``example`` (a default-built message).

        A list that is empty in the default message (a ``sequence<>``) ends the check there: what
        lies below it is only known from real messages.
        """
        cfg = self.config
        paths = [("field", cfg.field)]
        if cfg.joint_names:
            paths.append(("names_field", cfg.names_field))
        if cfg.count_field:
            paths.append(("count_field", cfg.count_field))
        check_paths(example, cfg.input_type, paths + stamp_paths(cfg.stamp_source, cfg.stamp_field))

    def stamp(self, msg: Any, receive_time: float) -> float:
        """The output stamp [s] of ``msg`` by ``stamp_source``."""
        cfg = self.config
        return message_stamp(msg, receive_time, cfg.stamp_source, cfg.stamp_field, cfg.stamp_field_scale)

    def raw_values(self, msg: Any) -> list[float] | Drop:
        """The selected raw values, one per output rotor in output order, before NaN/sign/scale."""
        cfg = self.config
        values = [float(v) for v in resolve(msg, cfg.field)]
        if cfg.count_field:
            count = int(resolve(msg, cfg.count_field))
            values = values[: max(count, 0)]
        if cfg.joint_names:
            names = list(resolve(msg, cfg.names_field))
            if len(names) != len(values):
                return Drop("names_mismatch", f"{len(names)} names for {len(values)} values in {cfg.field!r}")
            index = {n: i for i, n in enumerate(names)}
            missing = [n for n in cfg.joint_names if n not in index]
            if missing:
                return Drop("joint_missing", f"no joint named {missing} (message has {names})")
            return [values[index[n]] for n in cfg.joint_names]
        if len(values) <= max(self._order):
            return Drop(
                "too_few_values", f"{len(values)} values in {cfg.field!r}, motor order needs index {max(self._order)}"
            )
        return [values[i] for i in self._order]

    def convert(self, msg: Any, receive_time: float) -> Sample | Drop:
        """One message -> :class:`Sample` (stamp [s], speeds) or :class:`Drop` (reason, detail)."""
        cfg = self.config
        try:
            raw = self.raw_values(msg)
            stamp = self.stamp(msg, receive_time)
        except (AttributeError, TypeError, ValueError) as exc:
            return Drop("bad_message", f"{cfg.input_type}: {exc}")
        if isinstance(raw, Drop):
            return raw
        if not math.isfinite(stamp):
            return Drop("bad_stamp", f"stamp {stamp!r}")
        out = []
        for i, value in enumerate(raw):
            if math.isnan(value):
                if cfg.nan == "drop":
                    return Drop("nan", f"rotor {i} is NaN (set nan: zero if NaN means a stopped motor)")
                value = 0.0
            if value < 0.0:
                if cfg.sign == "drop_negative":
                    return Drop("negative", f"rotor {i} is {value:g}")
                if cfg.sign == "abs":
                    value = -value
            value = value * cfg.scale + cfg.offset
            if cfg.kind == "normalized" and cfg.clamp_normalized:
                value = min(max(value, 0.0), 1.0)
            if not math.isfinite(value):
                return Drop("non_finite", f"rotor {i} is {value!r} after scaling")
            out.append(value)
        return Sample(stamp, tuple(out))


class HoldLast:
    """Hold-last-value for slow telemetry: which samples go out, real and held.

    The node calls :meth:`on_sample` for every converted message and :meth:`tick` from a timer at
    ``hold_rate``; both take ``now``, the node clock [s]. A held sample carries the last real values
    with the stamp advanced by the time since that sample arrived (``stamp + (now - arrival)``), so
    it stays in the input's time base. Holding stops ``max_hold_age`` after the last real sample's
    arrival: then no message goes out and downstream staleness checks fire. Output stamps strictly
    increase: a real sample stamped at or before the last held one is not published itself; its
    values go out with the next tick, stamped on from the last stamp sent.
    """

    def __init__(self, hold_rate: float, max_hold_age: float) -> None:
        self.period = 1.0 / hold_rate if hold_rate > 0 else math.inf
        self.max_hold_age = max_hold_age
        self._last: Sample | None = None
        self._arrival = -math.inf
        self._last_out = -math.inf
        self._last_out_time = -math.inf
        self.held = 0
        """Held samples produced so far."""
        self.merged = 0
        """Real samples stamped at or before the last output (jitter), carried on by the next tick."""

    @property
    def enabled(self) -> bool:
        return math.isfinite(self.period)

    def on_sample(self, sample: Sample, now: float) -> Sample | None:
        """Remember ``sample``; return it to publish, or None when its stamp is not after the last output."""
        self._arrival = now
        if sample.stamp <= self._last_out:
            # Held stamps already passed it: carry its values on from the last stamp sent.
            self._last = Sample(self._last_out, sample.speeds)
            self.merged += 1
            return None
        self._last = sample
        self._last_out, self._last_out_time = sample.stamp, now
        return sample

    def tick(self, now: float) -> Sample | None:
        """The held sample to publish at ``now``, or None (nothing held, too soon, or too old)."""
        if self._last is None or not self.enabled:
            return None
        age = now - self._arrival
        if age > self.max_hold_age or now - self._last_out_time < 0.5 * self.period:
            return None
        stamp = self._last.stamp + age
        if stamp <= self._last_out:
            return None
        self._last_out, self._last_out_time = stamp, now
        self.held += 1
        return Sample(stamp, self._last.speeds)
