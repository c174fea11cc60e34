"""The bridges' message helpers: type names, field paths, install hints, and resolving a type by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from velobins_bridges.messages import (
    STAMP_SOURCES,
    MissingMessagePackage,
    check_paths,
    header_stamp,
    install_hint,
    message_class,
    message_stamp,
    parse_path,
    parse_type_name,
    resolve,
    stamp_paths,
)


def test_paths() -> None:
    assert parse_path("esc_status[].rpm") == (("esc_status", True), ("rpm", False))
    msg = SimpleNamespace(a=SimpleNamespace(b=[SimpleNamespace(c=1), SimpleNamespace(c=2)]))
    assert resolve(msg, "a.b[].c") == [1, 2]
    for bad in ("", "a..b", "a[0]", "a.b[]x", "1a"):
        with pytest.raises(ValueError, match="bad field path"):
            parse_path(bad)


def test_type_names() -> None:
    assert parse_type_name("px4_msgs/msg/SensorCombined") == ("px4_msgs", "SensorCombined")
    for bad in ("px4_msgs/SensorCombined", "px4_msgs/srv/X", "/msg/X", ""):
        with pytest.raises(ValueError, match="'output_type' must look like"):
            parse_type_name(bad, "output_type")


def test_install_hint_names_the_package() -> None:
    assert "mavros-msgs" in install_hint("mavros_msgs")
    assert "github.com/PX4/px4_msgs" in install_hint("px4_msgs")
    assert "crazyswarm2" in install_hint("crazyflie_interfaces")


def test_message_class_resolves_installed_types_and_names_missing_packages() -> None:
    msg_mod = pytest.importorskip("sensor_msgs.msg")
    assert message_class("sensor_msgs/msg/Imu") is msg_mod.Imu
    with pytest.raises(ValueError, match="package 'sensor_msgs' has no message 'Imu2'"):
        message_class("sensor_msgs/msg/Imu2")
    with pytest.raises(MissingMessagePackage, match=r"'px4_msgs' \(input_type px4_msgs/msg/SensorCombined\)"):
        message_class("px4_msgs/msg/SensorCombined")


def test_check_paths_names_the_parameter_and_the_fields_there() -> None:
    msg = SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(sec=3, nanosec=500_000_000)), values=[])
    check_paths(msg, "x/msg/Y", [("acc_field", "values"), ("stamp_source", "header.stamp"), ("f", "values[].z")])
    with pytest.raises(ValueError, match=r"'gyro_field': x/msg/Y has no field 'valuez'.*fields there: header, values"):
        check_paths(msg, "x/msg/Y", [("gyro_field", "valuez")])
    assert header_stamp(msg) == 3.5


def test_the_stamp_comes_from_the_source_asked_for_and_needs_only_its_path() -> None:
    """One stamp rule for the rotor and IMU bridges: header.stamp, arrival time, or a scaled numeric field."""
    stamp = SimpleNamespace(sec=12, nanosec=500_000_000)
    msg = SimpleNamespace(header=SimpleNamespace(stamp=stamp), timestamp=7_250_000)
    assert message_stamp(msg, 99.0, "header", "timestamp", 1e-6) == 12.5
    assert message_stamp(msg, 99.0, "receive", "timestamp", 1e-6) == 99.0
    assert message_stamp(msg, 99.0, "field", "timestamp", 1e-6) == pytest.approx(7.25)
    assert stamp_paths("header", "timestamp") == [("stamp_source", "header.stamp")]
    assert stamp_paths("field", "timestamp") == [("stamp_field", "timestamp")]
    assert stamp_paths("receive", "timestamp") == []
    assert set(STAMP_SOURCES) == {"header", "receive", "field"}
