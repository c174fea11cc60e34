"""What ``drone.launch.py`` starts around the network and the EKF for one vehicle: bridges, platform, topics.

A vehicle is wired by three choices and a few topic names, each a launch argument:

* ``platform:=crazyflie|px4|ardupilot`` (or a path to a YAML of the same form) names one file of
  ``config/platforms/`` that sets everything a vehicle family needs: which bridges run (its
  ``/**/velobins_platform`` section: ``imu_bridge``, ``rotor_bridge``, ``odom_out``) and the
  parameters of every node that differ from the defaults (frames, topics, stamps). It is loaded
  after ``params_file`` and the model's overlay, so it wins over both;
* ``imu_bridge:=PRESET``, ``rotor_bridge:=PRESET`` (files of ``config/imu_bridge/``,
  ``config/rotor_bridge/``, or paths), ``odom_out:=px4|mavros`` override the platform's choice;
  ``none`` turns a bridge off;
* ``imu_topic:=``, ``rotor_topic:=``, ``odometry_topic:=``, ``twist_topic:=`` rename the graph's
  topics at both ends at once (the nodes that read and the bridges that write them); empty keeps
  the parameter files' names.

:func:`plan_vehicle` turns the arguments into a :class:`VehiclePlan` of plain values; the launch
file only wraps them into ``Node`` actions, so all of this is tested where ``launch`` is not
installed. Node names are those of the parameter files' ``/**/<name>:`` keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from velobins_bringup.launch_args import BRIDGE, EKF, IMU_BRIDGE, NET, ODOM_OUT, resolve_preset

PLATFORM_NODE = "velobins_platform"
"""The section of a platform file that says which bridges run (no node has this name)."""
PLATFORM_CHOICES = ("imu_bridge", "rotor_bridge", "odom_out")
ODOM_OUT_MODES = ("px4", "mavros")
OFF = "none"
"""A bridge argument that turns the bridge off, whatever the platform says."""

TOPIC_ARGS: dict[str, tuple[tuple[str, str], ...]] = {
    "imu_topic": ((NET, "imu_topic"), (EKF, "imu_topic"), (IMU_BRIDGE, "output_topic")),
    "rotor_topic": ((NET, "rotor_topic"), (BRIDGE, "output_topic")),
    "odometry_topic": ((EKF, "odometry_topic"), (NET, "attitude_topic"), (ODOM_OUT, "input_topic")),
    "twist_topic": ((NET, "twist_topic"),),
}
"""Topic arguments -> the (node, parameter) pairs each sets: every reader and writer of that topic."""

_BRIDGES = {
    "imu_bridge": (IMU_BRIDGE, "velobins_imu_bridge", "imu_bridge"),
    "rotor_bridge": (BRIDGE, "velobins_rotor_bridge", "rotor_bridge"),
}
"""Bridge argument -> (node name, executable, preset folder of config/)."""


class VehicleError(ValueError):
    """A launch argument names no preset or platform, or a platform file is malformed (one line)."""


@dataclass(frozen=True)
class BridgeNode:
    """One bridge to start in ``velobins_bridges``: its parameter files in order, then its parameters."""

    name: str
    executable: str
    files: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VehiclePlan:
    """What the launch file adds to the network and EKF nodes, and the bridges it starts.

    Attributes:
        files: parameter files every node loads after params_file and the model overlay (the platform).
        params: node name -> parameters set by launch arguments (topics, frame prefix), loaded last.
        bridges: the bridge nodes, each with the platform file after its preset.
    """

    files: tuple[str, ...]
    params: dict[str, dict[str, Any]]
    bridges: tuple[BridgeNode, ...]


def _presets(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def _resolve_file(value: str, folder: Path, what: str) -> Path:
    """``value`` as a YAML in ``folder`` (by name) or as a path; VehicleError listing the names otherwise."""
    by_name = folder / f"{value}.yaml"
    if by_name.is_file():
        return by_name
    path = Path(value).expanduser()
    if value.endswith((".yaml", ".yml")) and path.is_file():
        return path
    raise VehicleError(
        f"{what}:={value}: no such {what} (shipped: {', '.join(_presets(folder)) or 'none'}; or a .yaml path)"
    )


def load_platform(value: str, share: Path) -> tuple[Path | None, dict[str, str]]:
    """The platform file ``value`` names (a name of config/platforms/ or a path) and its bridge choices.

    Returns ``(None, {})`` for an empty value. Raises :class:`VehicleError` naming the file and key
    for a file that is not a parameter file or a choice that is not a string.
    """
    if not value.strip():
        return None, {}
    path = _resolve_file(value.strip(), share / "platforms", "platform")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise VehicleError(f"{path}: not a readable YAML file ({exc})") from None
    key = f"/**/{PLATFORM_NODE}"
    section = doc.get(key) if isinstance(doc, dict) else None
    params = section.get("ros__parameters") if isinstance(section, dict) else None
    if not isinstance(params, dict):
        raise VehicleError(f"{path}: no '{key}: ros__parameters:' section saying which bridges run")
    unknown = set(params) - set(PLATFORM_CHOICES)
    if unknown:
        raise VehicleError(f"{path}: {key}: unknown key(s) {sorted(unknown)} (known: {', '.join(PLATFORM_CHOICES)})")
    for name, choice in params.items():
        if not isinstance(choice, str):
            raise VehicleError(f"{path}: {key}: '{name}' must be a string, got {choice!r}")
    return path, dict(params)


def plan_vehicle(share: str | Path, args: Mapping[str, str]) -> VehiclePlan:
    """The bridges, files and parameters for the launch arguments ``args`` (text, as launch gives them).

    ``share`` is velobins_bringup's ``config`` folder. Reads ``platform``, ``imu_bridge``,
    ``rotor_bridge``, ``odom_out``, ``frame_prefix`` and the :data:`TOPIC_ARGS`; missing ones are empty.
    """
    share = Path(share)
    value = {k: str(v).strip() for k, v in args.items()}
    platform, choices = load_platform(value.get("platform", ""), share)
    for name in PLATFORM_CHOICES:  # an argument overrides the platform's choice
        if value.get(name):
            choices[name] = value[name]
    files = (str(platform),) if platform else ()
    params: dict[str, dict[str, Any]] = {}
    for arg, targets in TOPIC_ARGS.items():
        if value.get(arg):
            for node, param in targets:
                params.setdefault(node, {})[param] = value[arg]
    prefix = value.get("frame_prefix", "")
    bridges = []
    for arg, (node, executable, folder) in _BRIDGES.items():
        choice = choices.get(arg, "")
        if choice and choice != OFF:
            preset = resolve_preset(choice, share / folder, node, arg)  # checked: a bad one starts nothing
            extra = {"frame_prefix": prefix} if node == IMU_BRIDGE else {}
            bridges.append(BridgeNode(node, executable, (str(preset), *files), {**extra, **params.get(node, {})}))
    mode = choices.get("odom_out", "")
    if mode and mode != OFF:
        if mode not in ODOM_OUT_MODES:
            raise VehicleError(f"odom_out:={mode}: must be one of {', '.join(ODOM_OUT_MODES)} or {OFF}")
        bridges.append(BridgeNode(ODOM_OUT, "velobins_odom_out", files, {"mode": mode, **params.get(ODOM_OUT, {})}))
    return VehiclePlan(files, {n: params[n] for n in (NET, EKF) if n in params}, tuple(bridges))
