"""The rotor bridge's conversion core, per shipped preset and per option (no ROS graph needed).

Each preset YAML is loaded as the node would read it and fed a message with its source's real
field layout: the real ``sensor_msgs/JointState`` where installed, and small stand-ins mirroring
the mavros_msgs / px4_msgs / crazyflie_interfaces definitions (those packages are not installed
here): ESCStatus{header, esc_status: ESCStatusItem{header, rpm, voltage, current}[]},
ESCTelemetry{header, esc_telemetry: ESCTelemetryItem{header, temperature, voltage, current,
totalcurrent, rpm, count}[]}, EscStatus{timestamp, counter, esc_count, ..., esc: EscReport[8]},
ActuatorMotors{timestamp, timestamp_sample, reversible_flags, control: float32[12]},
LogDataGeneric{header, timestamp, values}.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from velobins_bridges.messages import Drop
from velobins_bridges.rotor import (
    KINDS,
    BridgeConfig,
    HoldLast,
    RotorConverter,
    Sample,
)
from velobins_common.fields import coerce_value

PRESETS = Path(__file__).resolve().parents[2] / "velobins_bringup" / "config" / "rotor_bridge"
NODE_KEY = "/**/velobins_rotor_bridge"
NAN = float("nan")


def load_preset(name: str, **overrides: object) -> BridgeConfig:
    """The BridgeConfig a node started with ``--params-file <preset>`` gets (same type rules)."""
    doc = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    assert list(doc) == [NODE_KEY], f"{name}: top-level key must be {NODE_KEY!r} (applies under any namespace)"
    params = {**doc[NODE_KEY]["ros__parameters"], **overrides}
    values = {k: coerce_value(BridgeConfig, k, v) for k, v in params.items()}
    return dataclasses.replace(BridgeConfig(), **values)


# ---------------------------------------------------------------- stand-ins for the message types
def header(t: float, frame: str = "") -> SimpleNamespace:
    sec = int(t)
    return SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=round((t - sec) * 1e9)), frame_id=frame)


def esc_status(t: float, rpms: list[int]) -> SimpleNamespace:
    """mavros_msgs/ESCStatus."""
    items = [SimpleNamespace(header=header(t), rpm=r, voltage=15.3, current=11.6) for r in rpms]
    return SimpleNamespace(header=header(t), esc_status=items)


def esc_telemetry(t: float, rpms: list[int]) -> SimpleNamespace:
    """mavros_msgs/ESCTelemetry."""
    items = [
        SimpleNamespace(header=header(t), temperature=40.0, voltage=15.2, current=9.5, totalcurrent=0.4, rpm=r, count=7)
        for r in rpms
    ]
    return SimpleNamespace(header=header(t), esc_telemetry=items)


def px4_esc_status(t_us: int, rpms: list[int], count: int | None = None) -> SimpleNamespace:
    """px4_msgs/EscStatus: a fixed EscReport[8], the first esc_count valid."""
    reports = [
        SimpleNamespace(
            timestamp=t_us,
            esc_errorcount=0,
            esc_rpm=r,
            esc_voltage=15.0,
            esc_current=3.0,
            esc_temperature=35.0,
            esc_address=i + 1,
            esc_cmdcount=0,
            esc_state=0,
            actuator_function=101 + i,
            failures=0,
            esc_power=0,
        )
        for i, r in enumerate(list(rpms) + [0] * (8 - len(rpms)))
    ]
    return SimpleNamespace(
        timestamp=t_us,
        counter=1,
        esc_count=len(rpms) if count is None else count,
        esc_connectiontype=5,
        esc_online_flags=15,
        esc_armed_flags=15,
        esc=reports,
    )


def actuator_motors(t_us: int, control: list[float]) -> SimpleNamespace:
    """px4_msgs/ActuatorMotors: float32[12] control, NaN for unused / disarmed."""
    return SimpleNamespace(
        timestamp=t_us, timestamp_sample=t_us, reversible_flags=0, control=list(control) + [NAN] * (12 - len(control))
    )


def log_data_generic(t: float, values: list[float]) -> SimpleNamespace:
    """crazyflie_interfaces/LogDataGeneric."""
    return SimpleNamespace(header=header(t), timestamp=123456, values=values)


def joint_state(t: float, names: list[str], velocity: list[float]):
    """The real sensor_msgs/JointState (skips without the ROS wheels)."""
    msg_mod = pytest.importorskip("sensor_msgs.msg")
    msg = msg_mod.JointState()
    msg.header.stamp.sec, msg.header.stamp.nanosec = int(t), round((t - int(t)) * 1e9)
    msg.name = names
    msg.velocity = velocity
    msg.position = [0.0] * len(names)
    return msg


def convert(cfg: BridgeConfig, msg: object, now: float = 1000.0) -> Sample | Drop:
    return RotorConverter(cfg).convert(msg, now)


# ---------------------------------------------------------------- presets
def test_every_preset_loads_and_comments_its_source() -> None:
    names = sorted(p.stem for p in PRESETS.glob("*.yaml"))
    assert names == sorted(
        [
            "mavros_esc_status",
            "mavros_esc_telemetry",
            "px4_esc_status",
            "px4_actuator_motors",
            "joint_state",
            "crazyflie_pwm",
        ]
    )
    for name in names:
        cfg = load_preset(name)
        text = (PRESETS / f"{name}.yaml").read_text()
        assert cfg.input_type.split("/")[0] in text.split(NODE_KEY)[0], f"{name}: header comment names no source"
        assert "Motor order" in text and "Units" in text, f"{name}: say the units and the motor order"
        assert not cfg.input_topic.startswith("/") and not cfg.output_topic.startswith("/"), "relative topics"


def test_mavros_esc_status_negative_rpm_becomes_magnitude() -> None:
    cfg = load_preset("mavros_esc_status")
    out = convert(cfg, esc_status(12.5, [4266, -4224, 4266, -4230]))
    assert out == Sample(12.5, (4266.0, 4224.0, 4266.0, 4230.0))
    assert KINDS[RotorConverter(cfg).kind_index] == "rpm"
    assert cfg.hold_rate > 0 and cfg.max_hold_age > 0  # ~10 Hz telemetry is held


def test_mavros_esc_telemetry() -> None:
    cfg = load_preset("mavros_esc_telemetry", motor_order=[3, 2, 1, 0])
    out = convert(cfg, esc_telemetry(3.25, [1000, 2000, 3000, 4000]))
    assert out == Sample(3.25, (4000.0, 3000.0, 2000.0, 1000.0))


def test_px4_esc_status_uses_esc_count_and_receive_time() -> None:
    cfg = load_preset("px4_esc_status")
    out = convert(cfg, px4_esc_status(5_000_000, [9000, -9100, 9200, -9300]), now=77.0)
    assert out == Sample(77.0, (9000.0, 9100.0, 9200.0, 9300.0))
    short = convert(cfg, px4_esc_status(5_000_000, [9000, 9100, 9200, 9300], count=3))
    assert isinstance(short, Drop) and short.reason == "too_few_values"
    by_field = load_preset("px4_esc_status", stamp_source="field", stamp_field="timestamp")
    assert convert(by_field, px4_esc_status(5_250_000, [1, 2, 3, 4])).stamp == pytest.approx(5.25)


def test_px4_actuator_motors_nan_is_a_stopped_motor_and_values_are_clamped() -> None:
    cfg = load_preset("px4_actuator_motors")
    out = convert(cfg, actuator_motors(1, [0.5, NAN, 1.2, -0.25]), now=9.0)
    assert out == Sample(9.0, (0.5, 0.0, 1.0, 0.25))
    assert KINDS[RotorConverter(cfg).kind_index] == "normalized"


def test_joint_state_selects_and_orders_by_name() -> None:
    cfg = load_preset("joint_state")
    names = ["arm_joint", "rotor_3_joint", "rotor_1_joint", "rotor_0_joint", "rotor_2_joint"]
    out = convert(cfg, joint_state(4.5, names, [9.0, -400.0, -410.0, 420.0, 430.0]))
    assert out == Sample(4.5, (420.0, 410.0, 430.0, 400.0))
    missing = convert(cfg, joint_state(4.5, names[:3], [9.0, -400.0, -410.0]))
    assert isinstance(missing, Drop) and missing.reason == "joint_missing" and "rotor_0_joint" in missing.detail


def test_joint_state_paths_are_checked_against_the_real_message() -> None:
    msg_mod = pytest.importorskip("sensor_msgs.msg")
    RotorConverter(load_preset("joint_state")).check_type(msg_mod.JointState())
    with pytest.raises(ValueError, match=r"no field 'velocty'.*fields there: header, name, position, velocity"):
        RotorConverter(load_preset("joint_state", field="velocty")).check_type(msg_mod.JointState())


def test_crazyflie_pwm_is_normalised_by_65535() -> None:
    cfg = load_preset("crazyflie_pwm")
    out = convert(cfg, log_data_generic(2.0, [0.0, 32767.5, 65535.0, 70000.0]))
    assert out.stamp == 2.0
    assert out.speeds == pytest.approx((0.0, 0.5, 1.0, 1.0))


# ---------------------------------------------------------------- options
def test_motor_order_and_sign_modes() -> None:
    msg = SimpleNamespace(header=header(1.0), v=[10.0, -20.0, 30.0, -40.0, 50.0])
    base = {"field": "v", "num_rotors": 3, "motor_order": (4, 0, 1)}
    assert convert(BridgeConfig(**base, sign="abs"), msg).speeds == (50.0, 10.0, 20.0)
    assert convert(BridgeConfig(**base, sign="keep"), msg).speeds == (50.0, 10.0, -20.0)
    dropped = convert(BridgeConfig(**base, sign="drop_negative"), msg)
    assert isinstance(dropped, Drop) and dropped.reason == "negative"
    # Only the selected values count: index 3 (negative) is not used here.
    assert convert(BridgeConfig(field="v", num_rotors=2, motor_order=(0, 2), sign="drop_negative"), msg).speeds == (
        10.0,
        30.0,
    )


def test_scale_offset_after_sign_and_pwm_microseconds() -> None:
    msg = SimpleNamespace(header=header(1.0), pwm=[1000, 1500, 2000, 900])
    cfg = BridgeConfig(field="pwm", kind="normalized", scale=1e-3, offset=-1.0)
    assert convert(cfg, msg).speeds == pytest.approx((0.0, 0.5, 1.0, 0.0))  # 900 us clamps to 0
    unclamped = dataclasses.replace(cfg, clamp_normalized=False)
    assert convert(unclamped, msg).speeds == pytest.approx((0.0, 0.5, 1.0, -0.1))
    rpm_to_rad = BridgeConfig(field="pwm", kind="rad_per_sec", scale=2 * math.pi / 60)
    assert convert(rpm_to_rad, msg).speeds[0] == pytest.approx(1000 * 2 * math.pi / 60)  # no clamp: not normalized


def test_nan_modes() -> None:
    msg = SimpleNamespace(header=header(1.0), v=[1.0, NAN, 3.0, 4.0])
    dropped = convert(BridgeConfig(field="v"), msg)
    assert isinstance(dropped, Drop) and dropped.reason == "nan"
    assert convert(BridgeConfig(field="v", nan="zero"), msg).speeds == (1.0, 0.0, 3.0, 4.0)
    # A NaN outside the selected rotors (px4's unused outputs) never matters.
    assert convert(BridgeConfig(field="v", num_rotors=1, motor_order=(0,)), msg).speeds == (1.0,)


def test_drops_name_the_problem() -> None:
    too_few = convert(BridgeConfig(field="v"), SimpleNamespace(header=header(1.0), v=[1.0, 2.0]))
    assert too_few == Drop("too_few_values", "2 values in 'v', motor order needs index 3")
    wrong = convert(BridgeConfig(field="w"), SimpleNamespace(header=header(1.0), v=[1.0] * 4))
    assert isinstance(wrong, Drop) and wrong.reason == "bad_message"
    mismatch = convert(
        BridgeConfig(field="v", joint_names=("a", "b", "c", "d")),
        SimpleNamespace(header=header(1.0), name=["a", "b"], v=[1.0, 2.0, 3.0, 4.0]),
    )
    assert isinstance(mismatch, Drop) and mismatch.reason == "names_mismatch"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_type": "mavros_msgs/ESCStatus"}, "<package>/msg/<Type>"),
        ({"motor_order": (0, 1, 2)}, "'motor_order' has 3 entries"),
        ({"motor_order": (0, 1, 1, 2)}, "names an input twice"),
        ({"motor_order": (0, 1, 2, -1)}, ">= 0"),
        ({"motor_order": (0, 1, 2, 3), "joint_names": ("a", "b", "c", "d")}, "not both"),
        ({"field": "esc[0].rpm"}, "bad field path"),
    ],
)
def test_config_refuses_inconsistent_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        BridgeConfig(**kwargs)


def test_bad_choice_is_refused_like_the_node_does() -> None:
    with pytest.raises(ValueError, match="'sign': must be one of"):
        coerce_value(BridgeConfig, "sign", "absolute")


def test_kinds_match_the_message_constants() -> None:
    msg_mod = pytest.importorskip("velobins_msgs.msg")
    rs = msg_mod.RotorSpeeds
    assert [KINDS.index(k) for k in KINDS] == [rs.KIND_RAD_PER_SEC, rs.KIND_RPM, rs.KIND_NORMALIZED]


# ---------------------------------------------------------------- hold-last
def test_hold_last_republishes_restamped_until_max_hold_age() -> None:
    hold = HoldLast(hold_rate=50.0, max_hold_age=0.25)
    first = Sample(10.0, (100.0, 200.0, 300.0, 400.0))
    assert hold.on_sample(first, now=1000.0) == first
    out = []
    now = 1000.0
    for _ in range(40):  # 0.8 s of 50 Hz timer ticks, no new telemetry
        now += 0.02
        held = hold.tick(now)
        if held is not None:
            out.append((now, held))
    assert out, "nothing held"
    assert all(h.speeds == first.speeds for _, h in out)
    # Restamped in the input's time base: sample stamp + time since it arrived.
    assert all(h.stamp == pytest.approx(10.0 + (t - 1000.0)) for t, h in out)
    # Stops after max_hold_age: the last held sample is at most 0.25 s after the real one.
    assert out[-1][0] - 1000.0 <= 0.25 + 1e-9
    assert len(out) == 12  # ticks at 0.02 .. 0.24 s
    stamps = [h.stamp for _, h in out]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_hold_last_restarts_with_new_samples_and_keeps_stamps_increasing() -> None:
    hold = HoldLast(hold_rate=50.0, max_hold_age=0.25)
    hold.on_sample(Sample(10.0, (1.0,)), now=1000.0)
    published = [10.0]
    now = 1000.0
    for _ in range(6):
        now += 0.02
        held = hold.tick(now)
        if held is not None:
            published.append(held.stamp)
    # A real sample that arrives late (stamped before the last held stamp) updates the values but is
    # not published with a stamp going backwards; the next tick carries its values forward.
    late = Sample(10.1, (2.0,))
    assert hold.on_sample(late, now=now + 0.001) is None
    nxt = hold.tick(now + 0.02)
    assert nxt is not None and nxt.speeds == (2.0,) and nxt.stamp > published[-1]
    assert hold.merged == 1
    fresh = Sample(nxt.stamp + 0.05, (3.0,))
    assert hold.on_sample(fresh, now=now + 0.03) == fresh
    assert hold.tick(now + 0.035) is None  # too soon after a real sample


def test_hold_last_disabled_and_without_samples() -> None:
    off = HoldLast(hold_rate=0.0, max_hold_age=0.25)
    assert not off.enabled
    off.on_sample(Sample(1.0, (1.0,)), now=0.0)
    assert off.tick(0.1) is None
    assert HoldLast(hold_rate=50.0, max_hold_age=0.25).tick(5.0) is None
