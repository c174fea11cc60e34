"""What every bridge does with a message type it only knows by name: find it, walk its fields.

The bridges (rotor, IMU, odometry out) depend on no autopilot's message package: the type is a
parameter (``mavros_msgs/msg/ESCStatus``, ``px4_msgs/msg/SensorCombined``) resolved at start-up by
:func:`message_class`, and the values are found along field paths (``esc_status[].rpm``,
``accelerometer_m_s2``, ``linear_acceleration``) by :func:`resolve`. A missing package is one
:class:`MissingMessagePackage` line that says how to install it; a path that the type does not have
is refused at start-up by :func:`check_paths`, listing the fields that are there.

Nothing here imports rclpy: a message is any object with attribute access, so the cores are tested
with stand-ins of the packages that are not installed.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

_TYPE_NAME = re.compile(r"^([A-Za-z_]\w*)/msg/([A-Za-z_]\w*)$")
_SEGMENT = re.compile(r"^([A-Za-z_]\w*)(\[\])?$")


class Drop(NamedTuple):
    """Why a message was not converted: a short reason (the DropCounter key) and a detail line."""

    reason: str
    detail: str


class MissingMessagePackage(RuntimeError):
    """The message package of a bridge's type is not installed (the message says how to get it)."""


def parse_type_name(name: str, label: str = "input_type") -> tuple[str, str]:
    """``"mavros_msgs/msg/ESCStatus"`` -> ``("mavros_msgs", "ESCStatus")``; ValueError naming ``label`` otherwise."""
    match = _TYPE_NAME.match(name)
    if match is None:
        raise ValueError(f"'{label}' must look like '<package>/msg/<Type>', got {name!r}")
    return match.group(1), match.group(2)


def parse_path(path: str) -> tuple[tuple[str, bool], ...]:
    """``"esc_status[].rpm"`` -> ``(("esc_status", True), ("rpm", False))``: names, and whether each
    is a list walked element by element."""
    parts = tuple(_SEGMENT.match(p) for p in path.split("."))
    if not path or any(m is None for m in parts):
        raise ValueError(f"bad field path {path!r}: use names joined by '.', '[]' after a list of sub-messages")
    return tuple((m.group(1), m.group(2) is not None) for m in parts)  # type: ignore[union-attr]


def resolve(msg: Any, path: str) -> Any:
    """The value at ``path`` in ``msg`` (a list for paths through ``[]``); AttributeError if absent."""
    values = [msg]
    expanded = False
    for name, is_list in parse_path(path):
        values = [getattr(v, name) for v in values]
        if is_list:
            values = [item for v in values for item in v]
            expanded = True
    return values if expanded else values[0]


def install_hint(package: str) -> str:
    """How to get the message package ``package`` (one line, for the node's fatal message)."""
    distro = os.environ.get("ROS_DISTRO") or "$ROS_DISTRO"
    if package == "px4_msgs":
        return "build px4_msgs (github.com/PX4/px4_msgs, the branch matching your PX4) in your workspace"
    apt = f"ros-{distro}-{package.replace('_', '-')}"
    if package == "crazyflie_interfaces":
        return f"install {apt} or build Crazyswarm2 (github.com/IMRCLab/crazyswarm2) in your workspace"
    return f"install it: sudo apt install {apt} (or build it in your workspace)"


def message_class(type_name: str, label: str = "input_type") -> type:
    """The Python class of ``<package>/msg/<Type>``.

    Raises:
        MissingMessagePackage: the package is not installed (the message names it and how to install it).
        ValueError: the name is malformed, or the package has no such message.
    """
    package, name = parse_type_name(type_name, label)
    try:
        module = importlib.import_module(f"{package}.msg")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] != package:
            raise
        raise MissingMessagePackage(
            f"message package '{package}' ({label} {type_name}) is not installed; {install_hint(package)}"
        ) from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise ValueError(f"'{label}': package '{package}' has no message '{name}'")
    return cls


def field_names(obj: Any) -> list[str]:
    """The fields of a message (rosidl's ``get_fields_and_field_types``) or a plain object."""
    getter = getattr(obj, "get_fields_and_field_types", None)
    if getter is not None:
        return list(getter())
    return sorted(vars(obj)) if hasattr(obj, "__dict__") else []


def check_paths(example: Any, type_name: str, paths: Iterable[tuple[str, str]]) -> None:
    """Fail at start-up when a path does not exist on ``example`` (a default-built message).

    ``paths`` are ``(parameter name, path)`` pairs; the error names the parameter, the missing
    field and the fields that are there. A list that is empty in the default message (a
    ``sequence<>``) ends the check there: what lies below it is only known from real messages.
    """
    for label, path in paths:
        values = [example]
        for name, is_list in parse_path(path):
            if not values:
                break
            missing = [v for v in values if not hasattr(v, name)]
            if missing:
                raise ValueError(
                    f"'{label}': {type_name} has no field {name!r} on the way to {path!r} "
                    f"(fields there: {', '.join(field_names(missing[0])) or type(missing[0]).__name__})"
                )
            values = [getattr(v, name) for v in values]
            if is_list:
                values = [item for v in values for item in v]


def header_stamp(msg: Any) -> float:
    """``msg.header.stamp`` in seconds."""
    stamp = msg.header.stamp
    return stamp.sec + stamp.nanosec * 1e-9


STAMP_SOURCES = ("header", "receive", "field")
"""Where an input bridge takes its output stamp: ``header.stamp``, the node clock on arrival, or a numeric
field of the message (``stamp_field`` × ``stamp_field_scale``; px4's microsecond ``timestamp``)."""


def stamp_paths(source: str, field: str) -> list[tuple[str, str]]:
    """The (parameter, path) pairs a stamp taken from ``source`` needs on the input type (:func:`check_paths`)."""
    if source == "field":
        return [("stamp_field", field)]
    if source == "header":
        return [("stamp_source", "header.stamp")]
    return []


def message_stamp(msg: Any, receive_time: float, source: str, field: str, scale: float) -> float:
    """The output stamp [s] of ``msg`` by ``source`` (:data:`STAMP_SOURCES`)."""
    if source == "receive":
        return receive_time
    if source == "field":
        return float(resolve(msg, field)) * scale
    return header_stamp(msg)
