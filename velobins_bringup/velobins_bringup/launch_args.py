"""The arguments of the two launch files, written once: declared, typed and documented from here.

``ros2 launch`` hands an argument to a node as text that is then parsed as YAML, so ``flight:=001``
becomes the integer 1 and ``output_dir:=2024-05-01`` a date, and the node fails (or worse, works
with the wrong value). Every argument here therefore carries its type, and the launch files pass
it to the nodes through ``ParameterValue(..., value_type=<type>)``. The table is plain data, so
the tests check it against the nodes' config dataclasses without ``launch`` installed, and
``scripts/gen_config.py`` renders it into ``docs/ros_interface.md``.

``launch``/``launch_ros`` are imported inside the functions that need them (they exist on a full
ROS 2 install and in the Docker image, not in the PyPI wheels).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NET, EKF, REPLAY, EVAL, BRIDGE = (
    "velobins_net",
    "velobins_ekf",
    "velobins_replay",
    "velobins_eval",
    "velobins_rotor_bridge",
)
"""Node names (the parameter files' ``/**/<name>:`` keys)."""


@dataclass(frozen=True)
class LaunchArg:
    """One launch argument.

    Attributes:
        name: the argument (``name:=value``).
        type: str, float or bool: the type the value is given to the nodes as.
        default: text default; None = required.
        description: shown by ``ros2 launch ... --show-args`` and in the docs table.
        sets: the node parameters it sets, as (node name, parameter name).
    """

    name: str
    type: type
    default: str | None
    description: str
    sets: tuple[tuple[str, str], ...] = ()


_SHARED = (
    LaunchArg("namespace", str, "", "ROS namespace of every node and topic (e.g. /drone1); TF stays global"),
    LaunchArg("params_file", str, "<share>/config/velobins.yaml", "parameter file of all nodes (copy and edit)"),
    LaunchArg("log_level", str, "info", "log level of the VeloBins nodes (debug, info, warn, error, fatal)"),
    LaunchArg(
        "frame_prefix",
        str,
        "",
        "prepended to the frames the nodes publish (e.g. drone1/ → drone1/odom, drone1/base_link)",
        ((NET, "frame_prefix"), (EKF, "frame_prefix")),
    ),
    LaunchArg("rviz", bool, "false", "start RViz with rviz/velobins.rviz"),
)

_MODEL = (
    LaunchArg(
        "model",
        str,
        "",
        "shipped model name (crazyflie, crazyflie-reg) or a checkpoint path; a shipped model's EKF overlay "
        "is loaded after params_file",
    ),
    LaunchArg(
        "model_path",
        str,
        "",
        "checkpoint (.pt) from `velobins train`, or a shipped model name (same as model:=; give one of the two)",
        ((NET, "model_path"),),
    ),
)

DRONE_ARGS: tuple[LaunchArg, ...] = (
    *_MODEL,
    *_SHARED,
    LaunchArg("use_sim_time", bool, "false", "follow /clock (true when replaying a bag with --clock)", ()),
    LaunchArg(
        "rotor_bridge",
        str,
        "",
        "start velobins_rotor_bridge with this preset of config/rotor_bridge/ (e.g. mavros_esc_status); "
        "empty: the autopilot publishes velobins_msgs/RotorSpeeds itself",
    ),
)
"""Arguments of ``drone.launch.py``."""

REPLAY_ARGS: tuple[LaunchArg, ...] = (
    LaunchArg("bag", str, None, "bag directory written by `velobins convert`", ((REPLAY, "bag"),)),
    *_MODEL,
    LaunchArg("output_dir", str, "velobins_report", "report directory", ((EVAL, "output_dir"),)),
    LaunchArg("label", str, "velobins", "method name in the report", ((EVAL, "label"),)),
    LaunchArg("flight", str, "flight", "flight name in the report", ((EVAL, "flight"),)),
    LaunchArg("rate", float, "1.0", "replay speed factor", ((REPLAY, "rate"),)),
    *_SHARED,
)
"""Arguments of ``replay_eval.launch.py`` (sim time comes from config/evaluation.yaml)."""


def share_dir() -> str:
    """This package's share directory (launch files and installed config)."""
    from ament_index_python.packages import get_package_share_directory

    return get_package_share_directory("velobins_bringup")


def declarations(args: Sequence[LaunchArg]) -> list[Any]:
    """``DeclareLaunchArgument`` actions for ``args`` (the params_file default resolved)."""
    from launch.actions import DeclareLaunchArgument

    out = []
    for a in args:
        default = a.default
        if a.name == "params_file":
            default = os.path.join(share_dir(), "config", "velobins.yaml")
        kwargs = {} if default is None else {"default_value": default}
        out.append(DeclareLaunchArgument(a.name, description=a.description, **kwargs))
    return out


def typed(name: str, kind: type) -> Any:
    """The launch argument ``name`` as a node parameter of type ``kind`` (never YAML-guessed)."""
    from launch.substitutions import LaunchConfiguration
    from launch_ros.parameter_descriptions import ParameterValue

    return ParameterValue(LaunchConfiguration(name), value_type=kind)


def node_parameters(args: Sequence[LaunchArg], node: str) -> dict[str, Any]:
    """The parameters of ``node`` that launch arguments set, each typed (see module docstring)."""
    return {param: typed(a.name, a.type) for a in args for n, param in a.sets if n == node}


def ros_arguments() -> list[Any]:
    """``--log-level`` from the log_level argument (for ``Node(ros_arguments=...)``)."""
    from launch.substitutions import LaunchConfiguration

    return ["--log-level", LaunchConfiguration("log_level")]


@dataclass(frozen=True)
class LaunchModel:
    """What ``model:=`` / ``model_path:=`` resolve to.

    Attributes:
        checkpoint: the network node's ``model_path``.
        overlays: parameter files loaded after ``params_file`` (and evaluation.yaml): the EKF
            overlay a shipped model was evaluated with; empty for a user's own checkpoint.
    """

    checkpoint: str
    overlays: tuple[str, ...]


def resolve_launch_model(model: str, model_path: str) -> LaunchModel:
    """The checkpoint and overlay files of the ``model`` / ``model_path`` launch arguments.

    Either names a shipped model (``crazyflie``) or a checkpoint file
    (:func:`velobins_net.pretrained.resolve_model`); a shipped model brings its EKF overlay. Kept
    free of ``launch`` so tests call it where launch is not installed; the launch files call it
    from an ``OpaqueFunction``. Raises ``ValueError`` (one line) when neither or both are given,
    or for an unknown name (the message lists the shipped names).
    """
    from velobins_net.pretrained import resolve_model, shipped_models

    model, model_path = model.strip(), model_path.strip()
    if model and model_path:
        raise ValueError(f"give model:= or model_path:=, not both (model:={model}, model_path:={model_path})")
    if not (model or model_path):
        names = ", ".join(shipped_models()) or "none installed"
        raise ValueError(f"a model is required: model:=NAME (shipped: {names}) or model_path:=/path/to/best.pt")
    resolved = resolve_model(model or model_path)
    overlays = (str(resolved.overlay),) if resolved.overlay else ()
    return LaunchModel(str(resolved.checkpoint), overlays)


def fixed(value: object, kind: type) -> Any:
    """A value computed at launch time as a node parameter of type ``kind`` (never YAML-guessed)."""
    from launch_ros.parameter_descriptions import ParameterValue

    return ParameterValue(value, value_type=kind)
