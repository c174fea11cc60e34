"""VeloBins on a vehicle: the network node and the EKF node, parameters from one YAML, supervised.

    ros2 launch velobins_bringup drone.launch.py model:=crazyflie
    ros2 launch velobins_bringup drone.launch.py model_path:=/path/to/best.pt
    ros2 launch velobins_bringup drone.launch.py model:=crazyflie namespace:=/drone1 \
        rotor_bridge:=mavros_esc_status respawn:=true

Arguments (``--show-args``; table in docs/ros_interface.md): ``model`` (a shipped model name,
whose EKF overlay is loaded after ``params_file``, or a checkpoint) or ``model_path`` (one of the
two is required), ``namespace``, ``params_file``, ``log_level``, ``frame_prefix`` (default: the
namespace's, ``drone1/``), ``use_sim_time``, ``rotor_bridge`` (a preset of config/rotor_bridge/ or
the path of the user's own preset file), ``rviz``, ``respawn`` and ``respawn_delay``. They are
defined once in ``velobins_bringup/launch_args.py`` and reach the nodes typed (``flight:=001``
stays a string).

The model and the rotor-bridge preset are resolved before any node starts: a wrong one ends the
launch with one line and a non-zero status. A node that dies or cannot start stops the whole launch
with a non-zero status, or with ``respawn:=true`` is restarted (``velobins_bringup/supervision.py``).
"""

import os

from launch import LaunchDescription
from launch.actions import OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from velobins_bringup.launch_args import (
    BRIDGE,
    DRONE_ARGS,
    EKF,
    NET,
    declarations,
    fixed,
    node_parameters,
    resolve_launch_model,
    resolve_rotor_bridge,
    ros_arguments,
    share_dir,
    typed,
)
from velobins_bringup.supervision import Supervision, supervised


def generate_launch_description() -> LaunchDescription:
    share = share_dir()
    arg = LaunchConfiguration
    sim_time = {"use_sim_time": typed("use_sim_time", bool)}

    def stack(context, *args, **kwargs) -> list[Node]:
        """The supervised nodes, once every argument resolved: a bad one starts no node at all."""
        chosen = resolve_launch_model(arg("model").perform(context), arg("model_path").perform(context))
        presets = os.path.join(share, "config", "rotor_bridge")
        bridge = resolve_rotor_bridge(arg("rotor_bridge").perform(context), presets)
        supervision = Supervision.from_launch(arg("respawn").perform(context), arg("respawn_delay").perform(context))

        def node(package: str, executable: str, name: str, parameters: list) -> Node:
            return Node(
                package=package,
                executable=executable,
                name=name,
                namespace=arg("namespace"),
                output="screen",
                parameters=parameters,
                ros_arguments=ros_arguments(),
                **supervised(name, supervision),
            )

        files = [arg("params_file"), *chosen.overlays]
        model = {"model_path": fixed(chosen.checkpoint, str)}
        nodes = [
            node(
                "velobins_net",
                "velobins_net_node",
                NET,
                [*files, {**node_parameters(DRONE_ARGS, NET), **model, **sim_time}],
            ),
            node("velobins_ekf", "velobins_ekf_node", EKF, [*files, {**node_parameters(DRONE_ARGS, EKF), **sim_time}]),
        ]
        if bridge is not None:
            nodes.append(node("velobins_bridges", "velobins_rotor_bridge", BRIDGE, [bridge, sim_time]))
        return nodes

    return LaunchDescription(
        [
            *declarations(DRONE_ARGS),
            OpaqueFunction(function=stack),
            Node(
                package="rviz2",
                executable="rviz2",
                name="rviz2",
                namespace=arg("namespace"),
                arguments=["-d", os.path.join(share, "rviz", "velobins.rviz")],
                parameters=[sim_time],
                condition=IfCondition(arg("rviz")),
            ),
        ]
    )
