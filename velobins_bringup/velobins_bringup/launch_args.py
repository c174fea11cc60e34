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
from pathlib import Path
from typing import Any

NAMESPACE_PREFIX = "<namespace>/"
"""The ``frame_prefix`` default: derived from ``namespace`` by :func:`frame_prefix_for` at launch time."""

NET, EKF, REPLAY, EVAL, BRIDGE, IMU_BRIDGE, ODOM_OUT = (
    "velobins_net",
    "velobins_ekf",
    "velobins_replay",
    "velobins_eval",
    "velobins_rotor_bridge",
    "velobins_imu_bridge",
    "velobins_odom_out",
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
    LaunchArg(
        "namespace",
        str,
        "",
        "ROS namespace of every node and topic (e.g. /drone1); its frames get frame_prefix (drone1/)",
    ),
    LaunchArg("params_file", str, "<share>/config/velobins.yaml", "parameter file of all nodes (copy and edit)"),
    LaunchArg("log_level", str, "info", "log level of the VeloBins nodes (debug, info, warn, error, fatal)"),
    LaunchArg(
        "frame_prefix",
        str,
        NAMESPACE_PREFIX,
        "prepended to the frames the nodes publish (drone1/ → drone1/odom, drone1/base_link); default: the "
        "namespace's (namespace:=/drone1 → drone1/, none without a namespace); frame_prefix:='' for global frames",
        ((NET, "frame_prefix"), (EKF, "frame_prefix")),
    ),
    LaunchArg("rviz", bool, "false", "start RViz with rviz/velobins.rviz"),
    LaunchArg(
        "respawn",
        bool,
        "false",
        "restart a VeloBins node that dies (after respawn_delay) instead of stopping the whole launch with a "
        "non-zero status; a node that cannot start (bad model or parameter) always stops it",
    ),
    LaunchArg("respawn_delay", float, "1.0", "seconds before a dead node is restarted (respawn:=true)"),
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
        "platform",
        str,
        "",
        "vehicle config of config/platforms/ (crazyflie, px4, ardupilot) or a .yaml path: the bridges, frames "
        "and topics of a vehicle family in one file, loaded after params_file",
    ),
    LaunchArg(
        "rotor_bridge",
        str,
        "",
        "start velobins_rotor_bridge with this preset of config/rotor_bridge/ (e.g. mavros_esc_status) or a "
        ".yaml path; none: no bridge; empty: the platform's, else the autopilot publishes RotorSpeeds itself",
    ),
    LaunchArg(
        "imu_bridge",
        str,
        "",
        "start velobins_imu_bridge with this preset of config/imu_bridge/ (crazyflie, px4_sensor_combined, "
        "px4_vehicle_imu, mavros_imu) or a .yaml path; none: no bridge; empty: the platform's, else none",
    ),
    LaunchArg(
        "odom_out",
        str,
        "",
        "start velobins_odom_out: px4 (VehicleOdometry to EKF2) or mavros (nav_msgs/Odometry to mavros); "
        "none: no odometry out; empty: the platform's, else none",
    ),
    LaunchArg("imu_topic", str, "", "rename the IMU topic: the network and EKF inputs and the IMU bridge output"),
    LaunchArg("rotor_topic", str, "", "rename the rotor topic: the network input and the rotor bridge output"),
    LaunchArg(
        "odometry_topic",
        str,
        "",
        "rename the EKF's odometry (e.g. odometry/filtered); the network's attitude input and odometry out follow",
    ),
    LaunchArg("twist_topic", str, "", "rename the network's TwistWithCovarianceStamped output (robot_localization)"),
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
        elif default == NAMESPACE_PREFIX:
            default = _namespace_frame_prefix()
        kwargs = {} if default is None else {"default_value": default}
        out.append(DeclareLaunchArgument(a.name, description=a.description, **kwargs))
    return out


def frame_prefix_for(namespace: str) -> str:
    """The frame prefix of a namespace: ``/drone1`` → ``drone1/``, ``/fleet/a`` → ``fleet/a/``, none → ``""``.

    Two vehicles in two namespaces then publish distinct frames (``drone1/odom``, ``drone2/odom``)
    on the one TF tree without anyone having to repeat the namespace as ``frame_prefix:=``.
    """
    name = namespace.strip().strip("/")
    return f"{name}/" if name else ""


def _namespace_frame_prefix() -> Any:
    """The ``frame_prefix`` default as a launch substitution: :func:`frame_prefix_for` of ``namespace``.

    A substitution (not a value fixed here) because the namespace is known only at launch time;
    ``DeclareLaunchArgument`` performs it when ``frame_prefix`` is not given, so ``frame_prefix:=''``
    still means global frames. ``namespace`` is declared before ``frame_prefix`` (``_SHARED``).
    """
    from launch.substitution import Substitution
    from launch.substitutions import LaunchConfiguration

    class NamespaceFramePrefix(Substitution):
        def describe(self) -> str:
            return repr(NAMESPACE_PREFIX)

        def perform(self, context: Any) -> str:
            return frame_prefix_for(LaunchConfiguration("namespace").perform(context))

    return NamespaceFramePrefix()


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


def rotor_bridge_presets(presets_dir: str | Path) -> list[str]:
    """Names of the rotor-bridge presets in ``presets_dir`` (``config/rotor_bridge/<name>.yaml``), sorted."""
    return sorted(p.stem for p in Path(presets_dir).glob("*.yaml"))


def resolve_rotor_bridge(value: str, presets_dir: str | Path) -> str | None:
    """The parameter file ``rotor_bridge:=`` names: a preset name or a preset file of the user's; None if empty.

    A file that exists wins over a preset name (as for ``model:=``). Anything else stops the launch
    before a node starts: given a file it cannot read, ``launch_ros`` only warns "Parameter file
    path is not a file" and starts the bridge on its built-in defaults, a rotor stream that
    silently never comes (issue 23). Raises ``ValueError`` (one line, naming the presets) for an
    unknown name, an unreadable file, or a file without a ``velobins_rotor_bridge`` section.
    """
    return resolve_preset(value, presets_dir, BRIDGE, "rotor_bridge")


def resolve_preset(value: str, presets_dir: str | Path, node: str, arg: str) -> str | None:
    """:func:`resolve_rotor_bridge` for the preset of any bridge ``node`` given as ``arg:=value``."""
    text = value.strip()
    if not text:
        return None
    names = rotor_bridge_presets(presets_dir)
    path = Path(text).expanduser()
    if path.is_file():
        _check_bridge_file(path, text, presets_dir, node, arg)
        return str(path.resolve())
    if text in names:
        return str(Path(presets_dir) / f"{text}.yaml")
    raise ValueError(
        f"{arg}:={text}: no such preset or file (presets: {', '.join(names) or 'none installed'}; "
        "or the path of your own preset .yaml)"
    )


def _check_bridge_file(
    path: Path, text: str, presets_dir: str | Path, node: str = BRIDGE, arg: str = "rotor_bridge"
) -> None:
    """Raise ``ValueError`` unless ``path`` is YAML with ``ros__parameters`` for the bridge ``node``."""
    import yaml

    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())
        raise ValueError(f"{arg}:={text}: cannot read it as YAML ({reason})") from exc
    sections = content if isinstance(content, dict) else {}
    for key, section in sections.items():
        name = str(key).strip("/").rpartition("/")[2]
        if name in (node, "*", "**") and isinstance(section, dict) and "ros__parameters" in section:
            return
    raise ValueError(
        f"{arg}:={text}: no '/**/{node}: ros__parameters:' section "
        f"(start from a preset of {presets_dir}: {', '.join(rotor_bridge_presets(presets_dir))})"
    )
