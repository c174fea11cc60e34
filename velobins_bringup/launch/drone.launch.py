"""VeloBins on a vehicle: the network node and the EKF node, parameters from one YAML, supervised.

    ros2 launch velobins_bringup drone.launch.py model:=crazyflie
    ros2 launch velobins_bringup drone.launch.py model_path:=/path/to/best.pt
    ros2 launch velobins_bringup drone.launch.py model:=crazyflie namespace:=/drone1 \
        rotor_bridge:=mavros_esc_status respawn:=true
    ros2 launch velobins_bringup drone.launch.py model_path:=/models/best.pt platform:=px4

Arguments (``--show-args``; table in docs/ros_interface.md): ``model`` (a shipped model name,
whose EKF overlay is loaded after ``params_file``, or a checkpoint) or ``model_path`` (one of the
two is required), ``namespace``, ``params_file``, ``log_level``, ``frame_prefix`` (default: the
namespace's, ``drone1/``), ``use_sim_time``, ``platform`` (a vehicle config of config/platforms/),
``rotor_bridge`` / ``imu_bridge`` (a preset of config/rotor_bridge/ or config/imu_bridge/, or the
path of the user's own preset file), ``odom_out`` (px4, mavros), the topic names ``imu_topic``,
``rotor_topic``, ``odometry_topic``, ``twist_topic``, ``rviz``, ``respawn`` and ``respawn_delay``.
They are defined once in ``velobins_bringup/launch_args.py`` and reach the nodes typed
(``flight:=001`` stays a string); ``velobins_bringup/vehicle.py`` decides the bridges and topics.

The model, the platform and the bridge presets are resolved before any node starts: a wrong one ends
the launch with one line and a non-zero status. A node that dies or cannot start stops the whole launch
with a non-zero status, or with ``respawn:=true`` is restarted (``velobins_bringup/supervision.py``).
"""

import os

from launch import LaunchDescription
from launch.actions import OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from velobins_bringup.launch_args import (
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
from velobins_bringup.layouts import rviz_file
from velobins_bringup.supervision import Supervision, supervised
from velobins_bringup.vehicle import plan_vehicle


def generate_launch_description() -> LaunchDescription:
    share = share_dir()
    arg = LaunchConfiguration
    sim_time = {"use_sim_time": typed("use_sim_time", bool)}

    def stack(context, *args, **kwargs) -> list[Node]:
        """The supervised nodes, once every argument resolved: a bad one starts no node at all."""
        chosen = resolve_launch_model(arg("model").perform(context), arg("model_path").perform(context))
        values = {a.name: arg(a.name).perform(context) for a in DRONE_ARGS}
        vehicle = plan_vehicle(os.path.join(share, "config"), values)  # bridges, platform file, topic names
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

        files = [arg("params_file"), *chosen.overlays, *vehicle.files]
        model = {"model_path": fixed(chosen.checkpoint, str)}

        def remaps(name: str) -> dict:  # topic arguments (vehicle.TOPIC_ARGS), typed
            return {k: fixed(v, str) for k, v in vehicle.params.get(name, {}).items()}

        nodes = [
            node(
                "velobins_net",
                "velobins_net_node",
                NET,
                [*files, {**node_parameters(DRONE_ARGS, NET), **model, **remaps(NET), **sim_time}],
            ),
            node(
                "velobins_ekf",
                "velobins_ekf_node",
                EKF,
                [*files, {**node_parameters(DRONE_ARGS, EKF), **remaps(EKF), **sim_time}],
            ),
        ]
        for b in vehicle.bridges:  # IMU bridge, rotor bridge, odometry out: preset, then the platform file
            params = {k: fixed(v, type(v)) for k, v in b.params.items()}
            nodes.append(node("velobins_bridges", b.executable, b.name, [*b.files, {**params, **sim_time}]))
        return nodes

    return LaunchDescription(
        [
            *declarations(DRONE_ARGS),
            OpaqueFunction(function=stack),
            OpaqueFunction(  # the RViz config of this namespace and frame prefix (velobins_bringup.layouts)
                function=lambda context: [
                    Node(
                        package="rviz2",
                        executable="rviz2",
                        name="rviz2",
                        namespace=arg("namespace"),
                        arguments=[
                            "-d",
                            rviz_file(share, arg("namespace").perform(context), arg("frame_prefix").perform(context)),
                        ],
                        parameters=[sim_time],
                    )
                ],
                condition=IfCondition(arg("rviz")),
            ),
        ]
    )
