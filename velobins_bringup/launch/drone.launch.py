"""VeloBins on a vehicle: the network node and the EKF node, parameters from one YAML.

    ros2 launch velobins_bringup drone.launch.py model:=crazyflie
    ros2 launch velobins_bringup drone.launch.py model_path:=/path/to/best.pt
    ros2 launch velobins_bringup drone.launch.py model_path:=/models/best.pt namespace:=/drone1 \
        frame_prefix:=drone1/ rotor_bridge:=mavros_esc_status

Arguments (``--show-args``; table in docs/ros_interface.md): ``model`` (a shipped model name,
whose EKF overlay is loaded after ``params_file``, or a checkpoint) or ``model_path`` (one of the
two is required; resolved by ``launch_args.resolve_launch_model`` at launch time), ``namespace``,
``params_file``, ``log_level``, ``frame_prefix``, ``use_sim_time``,
``rotor_bridge`` (a preset of config/rotor_bridge/) and ``rviz``. They are defined once in
``velobins_bringup/launch_args.py`` and reach the nodes typed (``flight:=001`` stays a string).
"""

import os

from launch import LaunchDescription
from launch.actions import OpaqueFunction
from launch.conditions import IfCondition, LaunchConfigurationNotEquals
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
    ros_arguments,
    share_dir,
    typed,
)


def generate_launch_description() -> LaunchDescription:
    share = share_dir()
    arg = LaunchConfiguration
    sim_time = {"use_sim_time": typed("use_sim_time", bool)}

    def node(package: str, executable: str, name: str, parameters: list, **kwargs) -> Node:
        return Node(
            package=package,
            executable=executable,
            name=name,
            namespace=arg("namespace"),
            output="screen",
            parameters=parameters,
            ros_arguments=ros_arguments(),
            **kwargs,
        )

    def stack(context, *args, **kwargs) -> list[Node]:
        """Network and EKF nodes for the resolved model (a shipped one adds its overlay)."""
        chosen = resolve_launch_model(arg("model").perform(context), arg("model_path").perform(context))
        files = [arg("params_file"), *chosen.overlays]
        model = {"model_path": fixed(chosen.checkpoint, str)}
        return [
            node(
                "velobins_net",
                "velobins_net_node",
                NET,
                [*files, {**node_parameters(DRONE_ARGS, NET), **model, **sim_time}],
            ),
            node(
                "velobins_ekf",
                "velobins_ekf_node",
                EKF,
                [*files, {**node_parameters(DRONE_ARGS, EKF), **sim_time}],
            ),
        ]

    return LaunchDescription(
        [
            *declarations(DRONE_ARGS),
            OpaqueFunction(function=stack),
            node(
                "velobins_bridges",
                "velobins_rotor_bridge",
                BRIDGE,
                [[os.path.join(share, "config", "rotor_bridge", ""), arg("rotor_bridge"), ".yaml"], sim_time],
                condition=LaunchConfigurationNotEquals("rotor_bridge", ""),
            ),
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
