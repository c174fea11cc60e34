"""VeloBins on a vehicle: the network node and the EKF node, parameters from one YAML.

    ros2 launch velobins_bringup drone.launch.py model_path:=/path/to/best.pt
    ros2 launch velobins_bringup drone.launch.py model_path:=/models/best.pt namespace:=/drone1 \
        frame_prefix:=drone1/ rotor_bridge:=mavros_esc_status

Arguments (``--show-args``; table in docs/ros_interface.md): ``model_path`` (required),
``namespace``, ``params_file``, ``log_level``, ``frame_prefix``, ``use_sim_time``,
``rotor_bridge`` (a preset of config/rotor_bridge/) and ``rviz``. They are defined once in
``velobins_bringup/launch_args.py`` and reach the nodes typed (``flight:=001`` stays a string).
"""

import os

from launch import LaunchDescription
from launch.conditions import IfCondition, LaunchConfigurationNotEquals
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from velobins_bringup.launch_args import (
    BRIDGE,
    DRONE_ARGS,
    EKF,
    NET,
    declarations,
    node_parameters,
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

    return LaunchDescription(
        [
            *declarations(DRONE_ARGS),
            node(
                "velobins_net",
                "velobins_net_node",
                NET,
                [arg("params_file"), {**node_parameters(DRONE_ARGS, NET), **sim_time}],
            ),
            node(
                "velobins_ekf",
                "velobins_ekf_node",
                EKF,
                [arg("params_file"), {**node_parameters(DRONE_ARGS, EKF), **sim_time}],
            ),
            node(
                "velobins_net",
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
