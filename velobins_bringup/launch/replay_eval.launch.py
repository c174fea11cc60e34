"""Replay a VeloBins bag through the network + EKF graph and score it against ground truth.

    ros2 launch velobins_bringup replay_eval.launch.py bag:=flight_bag model_path:=velobins.ckpt \
        output_dir:=report rate:=2.0

Starts the nodes of drone.launch.py with ``use_sim_time``, the replay node (publishes ``/clock``)
and the eval node, which writes metrics.json, metrics.md and plots to ``output_dir`` when the
replay finishes; the launch then shuts down.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, IncludeLaunchDescription, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("velobins_bringup")
    params_file = LaunchConfiguration("params_file")
    eval_node = Node(
        package="velobins_eval",
        executable="velobins_eval_node",
        name="velobins_eval",
        output="screen",
        parameters=[
            params_file,
            {
                "output_dir": LaunchConfiguration("output_dir"),
                "label": LaunchConfiguration("label"),
                "use_sim_time": True,
            },
        ],
    )
    return LaunchDescription(
        [
            DeclareLaunchArgument("bag", description="bag directory written by `velobins convert`"),
            DeclareLaunchArgument("model_path", description="VeloBins checkpoint (.pt)"),
            DeclareLaunchArgument("output_dir", default_value="velobins_report", description="where the report goes"),
            DeclareLaunchArgument("label", default_value="velobins", description="name of this run in the report"),
            DeclareLaunchArgument("rate", default_value="1.0", description="replay speed factor"),
            DeclareLaunchArgument("rviz", default_value="false", description="start RViz"),
            DeclareLaunchArgument(
                "params_file", default_value=os.path.join(share, "config", "velobins.yaml"), description="parameters"
            ),
            IncludeLaunchDescription(
                PythonLaunchDescriptionSource(os.path.join(share, "launch", "drone.launch.py")),
                launch_arguments={
                    "model_path": LaunchConfiguration("model_path"),
                    "params_file": params_file,
                    "use_sim_time": "true",
                    "rviz": LaunchConfiguration("rviz"),
                }.items(),
            ),
            Node(
                package="velobins_eval",
                executable="velobins_replay_node",
                name="velobins_replay",
                output="screen",
                parameters=[
                    params_file,
                    {
                        "bag": LaunchConfiguration("bag"),
                        "rate": ParameterValue(LaunchConfiguration("rate"), value_type=float),
                    },
                ],
            ),
            eval_node,
            RegisterEventHandler(OnProcessExit(target_action=eval_node, on_exit=[EmitEvent(event=Shutdown())])),
        ]
    )
