"""VeloBins on a vehicle: the network node and the EKF node, parameters from one YAML.

    ros2 launch velobins_bringup drone.launch.py model_path:=/path/to/velobins.ckpt

Arguments: ``model_path`` (checkpoint from ``velobins train``), ``params_file`` (defaults to
``config/velobins.yaml`` of this package), ``use_sim_time`` (true when replaying a bag with /clock),
``rviz`` (start RViz with ``rviz/velobins.rviz``).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("velobins_bringup")
    params_file = LaunchConfiguration("params_file")
    use_sim_time = ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "params_file",
                default_value=os.path.join(share, "config", "velobins.yaml"),
                description="YAML with the parameters of all VeloBins nodes",
            ),
            DeclareLaunchArgument("model_path", description="VeloBins checkpoint (.pt) from `velobins train`"),
            DeclareLaunchArgument("use_sim_time", default_value="false", description="follow /clock (bag replay)"),
            DeclareLaunchArgument("rviz", default_value="false", description="start RViz"),
            Node(
                package="velobins_net",
                executable="velobins_net_node",
                name="velobins_net",
                output="screen",
                parameters=[
                    params_file,
                    {"model_path": LaunchConfiguration("model_path"), "use_sim_time": use_sim_time},
                ],
            ),
            Node(
                package="velobins_ekf",
                executable="velobins_ekf_node",
                name="velobins_ekf",
                output="screen",
                parameters=[params_file, {"use_sim_time": use_sim_time}],
            ),
            Node(
                package="rviz2",
                executable="rviz2",
                name="rviz2",
                arguments=["-d", os.path.join(share, "rviz", "velobins.rviz")],
                parameters=[{"use_sim_time": use_sim_time}],
                condition=IfCondition(LaunchConfiguration("rviz")),
            ),
        ]
    )
