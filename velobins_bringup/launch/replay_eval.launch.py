"""Replay a VeloBins bag through the network + EKF graph and score it against ground truth.

    ros2 launch velobins_bringup replay_eval.launch.py bag:=flight_bag model_path:=best.pt \
        output_dir:=report rate:=2.0
    ros2 launch velobins_bringup replay_eval.launch.py bag:=flight_bag model:=crazyflie

Starts the network and EKF nodes (as drone.launch.py does) with ``params_file`` (default
``config/velobins.yaml``) plus the overrides of ``config/evaluation.yaml`` (sim time, filter
started from ground truth) and, for a shipped ``model:=`` name, its EKF overlay; then the replay
node (publishes ``/clock``) and the eval node, which writes metrics.json, metrics.md and plots to
``output_dir`` when the replay finishes; the launch then shuts down with status 0. Arguments are
defined once in ``velobins_bringup/launch_args.py`` and reach the nodes typed (``flight:=001`` and
``output_dir:=2024-05-01`` stay strings).

Supervised as drone.launch.py (``velobins_bringup/supervision.py``): a node that dies or cannot
start ends the launch with a non-zero status; ``respawn:=true`` restarts the network and EKF nodes
(never the replay or eval node).
"""

import os

from launch import LaunchDescription
from launch.actions import EmitEvent, OpaqueFunction
from launch.conditions import IfCondition
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from velobins_bringup.launch_args import (
    EKF,
    EVAL,
    NET,
    REPLAY,
    REPLAY_ARGS,
    declarations,
    fixed,
    node_parameters,
    resolve_launch_model,
    ros_arguments,
    share_dir,
)
from velobins_bringup.supervision import Supervision, supervised


def generate_launch_description() -> LaunchDescription:
    share = share_dir()
    arg = LaunchConfiguration
    files = [arg("params_file"), os.path.join(share, "config", "evaluation.yaml")]

    def stack(context, *args, **kwargs) -> list[Node]:
        """The supervised nodes, once every argument resolved: a bad one starts no node at all."""
        chosen = resolve_launch_model(arg("model").perform(context), arg("model_path").perform(context))
        supervision = Supervision.from_launch(arg("respawn").perform(context), arg("respawn_delay").perform(context))

        def node(
            package: str,
            executable: str,
            name: str,
            overlays: tuple[str, ...] = (),
            extra: dict | None = None,
            **supervise,
        ) -> Node:
            return Node(
                package=package,
                executable=executable,
                name=name,
                namespace=arg("namespace"),
                output="screen",
                parameters=[*files, *overlays, {**node_parameters(REPLAY_ARGS, name), **(extra or {})}],
                ros_arguments=ros_arguments(),
                **supervised(name, supervision, **supervise),
            )

        model = {"model_path": fixed(chosen.checkpoint, str)}
        return [
            node("velobins_net", "velobins_net_node", NET, chosen.overlays, model),
            node("velobins_ekf", "velobins_ekf_node", EKF, chosen.overlays),
            # The replay ends when the bag is published; the eval node then writes the report and
            # its end ends the launch. Neither is restarted: the report would mix two runs.
            node("velobins_eval", "velobins_replay_node", REPLAY, restartable=False, on_finish=[]),
            node(
                "velobins_eval",
                "velobins_eval_node",
                EVAL,
                restartable=False,
                on_finish=[EmitEvent(event=Shutdown(reason="evaluation written"))],
            ),
        ]

    return LaunchDescription(
        [
            *declarations(REPLAY_ARGS),
            OpaqueFunction(function=stack),
            Node(
                package="rviz2",
                executable="rviz2",
                name="rviz2",
                namespace=arg("namespace"),
                arguments=["-d", os.path.join(share, "rviz", "velobins.rviz")],
                parameters=[{"use_sim_time": True}],
                condition=IfCondition(arg("rviz")),
            ),
        ]
    )
