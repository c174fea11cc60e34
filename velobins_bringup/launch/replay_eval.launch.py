"""Replay a VeloBins bag through the network + EKF graph and score it against ground truth.

    ros2 launch velobins_bringup replay_eval.launch.py bag:=flight_bag model_path:=velobins.pt \
        output_dir:=report rate:=2.0

Starts the network and EKF nodes (as drone.launch.py does) with ``config/velobins.yaml`` plus the
overrides of ``config/evaluation.yaml`` (sim time, filter started from ground truth), the replay
node (publishes ``/clock``) and the eval node, which writes metrics.json, metrics.md and plots to
``output_dir`` when the replay finishes; the launch then shuts down.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("velobins_bringup")
    params = [LaunchConfiguration("params_file"), os.path.join(share, "config", "evaluation.yaml")]
    arg = LaunchConfiguration

    def node(package: str, executable: str, name: str, extra: dict | None = None) -> Node:
        return Node(
            package=package, executable=executable, name=name, output="screen", parameters=[*params, extra or {}]
        )

    eval_node = node(
        "velobins_eval",
        "velobins_eval_node",
        "velobins_eval",
        {"output_dir": arg("output_dir"), "label": arg("label"), "flight": arg("flight")},
    )
    return LaunchDescription(
        [
            DeclareLaunchArgument("bag", description="bag directory written by `velobins convert`"),
            DeclareLaunchArgument("model_path", description="VeloBins checkpoint (.pt)"),
            DeclareLaunchArgument("output_dir", default_value="velobins_report", description="report directory"),
            DeclareLaunchArgument("label", default_value="velobins", description="method name in the report"),
            DeclareLaunchArgument("flight", default_value="flight", description="flight name in the report"),
            DeclareLaunchArgument("rate", default_value="1.0", description="replay speed factor"),
            DeclareLaunchArgument("rviz", default_value="false", description="start RViz"),
            DeclareLaunchArgument(
                "params_file", default_value=os.path.join(share, "config", "velobins.yaml"), description="parameters"
            ),
            node("velobins_net", "velobins_net_node", "velobins_net", {"model_path": arg("model_path")}),
            node("velobins_ekf", "velobins_ekf_node", "velobins_ekf"),
            node(
                "velobins_eval",
                "velobins_replay_node",
                "velobins_replay",
                {"bag": arg("bag"), "rate": ParameterValue(arg("rate"), value_type=float)},
            ),
            eval_node,
            Node(
                package="rviz2",
                executable="rviz2",
                name="rviz2",
                arguments=["-d", os.path.join(share, "rviz", "velobins.rviz")],
                parameters=[{"use_sim_time": True}],
                condition=IfCondition(arg("rviz")),
            ),
            RegisterEventHandler(OnProcessExit(target_action=eval_node, on_exit=[EmitEvent(event=Shutdown())])),
        ]
    )
