"""The IMU bridge's conversion core, per shipped preset, against hand-computed values (no ROS graph).

Each preset YAML is loaded as the node reads it and fed a message with its source's real field
layout: the real ``sensor_msgs/Imu`` for mavros, and stand-ins mirroring the definitions of the
packages not installed here: crazyflie_interfaces/LogDataGeneric{header, uint32 timestamp,
float32[] values}; px4_msgs/SensorCombined{uint64 timestamp, float32[3] gyro_rad, uint32
gyro_integral_dt, int32 accelerometer_timestamp_relative, float32[3] accelerometer_m_s2, uint32
accelerometer_integral_dt, uint8 accelerometer_clipping, gyro_clipping, accel_calibration_count,
gyro_calibration_count}; px4_msgs/VehicleImu{uint64 timestamp, timestamp_sample, uint32
accel_device_id, gyro_device_id, float32[3] delta_angle, delta_velocity, uint16 delta_angle_dt,
delta_velocity_dt, uint8 delta_angle_clipping, delta_velocity_clipping, accel_calibration_count,
gyro_calibration_count}.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from velobins_bridges.imu import (
    FORCE_RANGE,
    ForceMeter,
    ImuBridgeConfig,
    ImuConverter,
    ImuSample,
    force_problem,
)
from velobins_bridges.messages import Drop
from velobins_common.constants import STANDARD_GRAVITY
from velobins_common.fields import coerce_value
from velobins_common.health import WARN

PRESETS = Path(__file__).resolve().parents[2] / "velobins_bringup" / "config" / "imu_bridge"
NODE_KEY = "/**/velobins_imu_bridge"
G = STANDARD_GRAVITY


def load_preset(name: str, **overrides: object) -> ImuBridgeConfig:
    """The ImuBridgeConfig a node started with ``--params-file <preset>`` gets (same type rules)."""
    doc = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    assert list(doc) == [NODE_KEY], f"{name}: top-level key must be {NODE_KEY!r} (applies under any namespace)"
    params = {**doc[NODE_KEY]["ros__parameters"], **overrides}
    values = {k: coerce_value(ImuBridgeConfig, k, v) for k, v in params.items()}
    return dataclasses.replace(ImuBridgeConfig(), **values)


def convert(cfg: ImuBridgeConfig, msg: object, receive: float = 0.0) -> ImuSample | Drop:
    return ImuConverter(cfg).convert(msg, receive)


def header(t: float, frame: str = "") -> SimpleNamespace:
    sec = int(t)
    return SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=round((t - sec) * 1e9)), frame_id=frame)


def log_data_generic(t: float, values: list[float]) -> SimpleNamespace:
    """crazyflie_interfaces/LogDataGeneric."""
    return SimpleNamespace(header=header(t), timestamp=4242, values=values)


def sensor_combined(t_us: int, gyro: list[float], acc: list[float], acc_rel: int = -120) -> SimpleNamespace:
    """px4_msgs/SensorCombined."""
    return SimpleNamespace(
        timestamp=t_us,
        gyro_rad=gyro,
        gyro_integral_dt=4000,
        accelerometer_timestamp_relative=acc_rel,
        accelerometer_m_s2=acc,
        accelerometer_integral_dt=4000,
        accelerometer_clipping=0,
        gyro_clipping=0,
        accel_calibration_count=0,
        gyro_calibration_count=0,
    )


def vehicle_imu(t_us: int, d_angle: list[float], d_vel: list[float], dt_a: int, dt_v: int) -> SimpleNamespace:
    """px4_msgs/VehicleImu."""
    return SimpleNamespace(
        timestamp=t_us + 300,
        timestamp_sample=t_us,
        accel_device_id=1,
        gyro_device_id=2,
        delta_angle=d_angle,
        delta_velocity=d_vel,
        delta_angle_dt=dt_a,
        delta_velocity_dt=dt_v,
        delta_angle_clipping=0,
        delta_velocity_clipping=0,
        accel_calibration_count=0,
        gyro_calibration_count=0,
    )


def approx(sample: ImuSample | Drop, stamp: float, acc: tuple, gyro: tuple) -> None:
    assert isinstance(sample, ImuSample), sample
    assert sample.stamp == pytest.approx(stamp, abs=1e-9)
    assert sample.acc == pytest.approx(acc, abs=1e-9)
    assert sample.gyro == pytest.approx(gyro, abs=1e-9)


# ---------------------------------------------------------------- presets
@pytest.mark.parametrize("name", ["crazyflie", "px4_sensor_combined", "px4_vehicle_imu", "mavros_imu"])
def test_every_preset_loads_and_publishes_imu(name: str) -> None:
    cfg = load_preset(name)
    assert cfg.output_topic == "imu" and cfg.frame_id == "base_link"


def test_crazyflie_g_and_deg_per_s_to_si() -> None:
    cfg = load_preset("crazyflie")
    out = convert(cfg, log_data_generic(12.25, [0.1, -0.2, 1.0, 90.0, -45.0, 180.0]))
    approx(out, 12.25, (0.980665, -1.96133, 9.80665), (math.pi / 2, -math.pi / 4, math.pi))
    short = convert(cfg, log_data_generic(1.0, [0.0, 0.0, 1.0, 0.0, 0.0]))  # a vars list with 5 entries
    assert isinstance(short, Drop) and short.reason == "bad_message" and "index 5" in short.detail


def test_px4_sensor_combined_frd_to_flu_and_microsecond_stamps() -> None:
    cfg = load_preset("px4_sensor_combined")
    msg = sensor_combined(1_700_000_000_123_456, gyro=[0.1, 0.2, 0.3], acc=[1.0, 2.0, -9.8])
    approx(convert(cfg, msg), 1_700_000_000.123456, (1.0, -2.0, 9.8), (0.1, -0.2, -0.3))
    invalid = convert(cfg, sensor_combined(1_000_000, [0.0] * 3, [0.0] * 3, acc_rel=2147483647))
    assert isinstance(invalid, Drop) and invalid.reason == "invalid"


def test_px4_vehicle_imu_deltas_over_their_periods() -> None:
    cfg = load_preset("px4_vehicle_imu")
    # 5 ms of delta velocity, 4 ms of delta angle (the two periods differ on PX4)
    msg = vehicle_imu(2_500_000, d_angle=[0.0004, 0.0008, -0.002], d_vel=[0.005, 0.01, -0.049], dt_a=4000, dt_v=5000)
    approx(convert(cfg, msg), 2.5, (1.0, -2.0, 9.8), (0.1, -0.2, 0.5))
    zero = convert(cfg, vehicle_imu(2_500_000, [0.0] * 3, [0.0] * 3, dt_a=4000, dt_v=0))
    assert isinstance(zero, Drop) and zero.reason == "bad_dt"


def test_mavros_imu_keeps_values_and_names_our_body_frame() -> None:
    msg_mod = pytest.importorskip("sensor_msgs.msg")
    msg = msg_mod.Imu()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1234, 500_000_000
    msg.header.frame_id = "base_link"  # mavros' frame id
    msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = 0.3, -0.4, 9.7
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = 0.01, 0.02, -0.03
    cfg = load_preset("mavros_imu", frame_prefix="drone1/")
    converter = ImuConverter(cfg)
    converter.check_type(msg_mod.Imu())
    approx(converter.convert(msg, 0.0), 1234.5, (0.3, -0.4, 9.7), (0.01, 0.02, -0.03))
    assert cfg.output_frame == "drone1/base_link"


def test_paths_are_checked_against_the_real_message() -> None:
    msg_mod = pytest.importorskip("sensor_msgs.msg")
    with pytest.raises(ValueError, match=r"'acc_field'.*no field 'linear_accel'.*fields there: header, orientation"):
        ImuConverter(load_preset("mavros_imu", acc_field="linear_accel")).check_type(msg_mod.Imu())


# ---------------------------------------------------------------- options and bad input
def test_receive_stamp_and_bad_values() -> None:
    cfg = load_preset("crazyflie", stamp_source="receive")
    approx(convert(cfg, log_data_generic(0.0, [0, 0, 1, 0, 0, 0]), receive=77.5), 77.5, (0, 0, G), (0, 0, 0))
    nan = convert(load_preset("crazyflie"), log_data_generic(1.0, [0, 0, float("nan"), 0, 0, 0]))
    assert isinstance(nan, Drop) and nan.reason == "non_finite"
    unset = convert(load_preset("crazyflie"), log_data_generic(0.0, [0, 0, 1, 0, 0, 0]))
    assert isinstance(unset, Drop) and unset.reason == "bad_stamp"
    wrong_type = convert(load_preset("crazyflie"), SimpleNamespace(header=header(1.0), values=None))
    assert isinstance(wrong_type, Drop) and wrong_type.reason == "bad_message"


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="'acc_index' must be three indices"):
        ImuBridgeConfig(acc_index=(0, 1))
    with pytest.raises(ValueError, match="bad field path"):
        ImuBridgeConfig(gyro_field="gyro[0]")
    with pytest.raises(ValueError, match="'input_type' must look like"):
        ImuBridgeConfig(input_type="SensorCombined")
    with pytest.raises(ValueError, match="'acc_unit': must be one of"):
        coerce_value(ImuBridgeConfig, "acc_unit", "mg")


# ---------------------------------------------------------------- health
def test_unit_check_flags_implausible_specific_force() -> None:
    assert force_problem(None) is None and force_problem(G) is None and force_problem(2.5 * G) is None
    as_m_s2 = force_problem(1.0)  # a source in g read as m/s², at rest
    assert as_m_s2 is not None and as_m_s2.level == WARN and "acc_unit" in as_m_s2.message
    assert force_problem(G * G) is not None  # a source in m/s² read with acc_unit g
    assert FORCE_RANGE[0] < G < FORCE_RANGE[1] < G * G


def test_force_meter_averages_the_last_window() -> None:
    meter = ForceMeter(window=3)
    assert meter.mean() is None
    for acc in ((0, 0, 100.0), (3.0, 4.0, 0.0), (0, 0, 5.0), (0, 0, 8.0)):
        meter.add(acc)
    assert meter.mean() == pytest.approx(6.0)
