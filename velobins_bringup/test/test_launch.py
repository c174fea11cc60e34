"""The launch files load and describe the documented graph, in this process, with the real launch system.

``launch`` / ``launch_ros`` come from the vendored Jazzy packages (:mod:`launch_harness`); the tests
skip, naming the folder, where they are absent. Running the files for real is
test_launch_supervision.py and test_launch_start.py.
"""

from __future__ import annotations

import importlib.util
import warnings

import launch_harness as lh
import pytest

pytestmark = pytest.mark.skipif(lh.launch_vendor() is None, reason=lh.skip_reason())


@pytest.fixture(autouse=True)
def _launch_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(lh.launch_vendor()))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), lh.LAUNCH_DIR / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_launch_description()


def _context(description, **arguments: str):
    """A launch context after the description's argument declarations ran with ``arguments`` given."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument

    context = LaunchContext()
    context.launch_configurations.update(arguments)
    for entity in description.entities:
        if isinstance(entity, DeclareLaunchArgument):
            entity.execute(context)
    return context


def test_drone_launch_declares_arguments_and_nodes() -> None:
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecated launch API (Jazzy warns on LaunchConfigurationNotEquals)
        description = _load("drone.launch.py")
    args = {a.name for a in description.entities if isinstance(a, DeclareLaunchArgument)}
    assert {"model", "model_path", "params_file", "use_sim_time", "rviz", "namespace", "log_level"} <= args
    assert {"frame_prefix", "rotor_bridge", "respawn", "respawn_delay"} <= args
    assert {"platform", "imu_bridge", "odom_out", "imu_topic", "rotor_topic", "odometry_topic", "twist_topic"} <= args
    # The supervised nodes come from an OpaqueFunction that resolves the arguments at launch time.
    stack = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    context = _context(description, model="crazyflie")
    assert {n.node_executable for n in stack.execute(context)} == {"velobins_net_node", "velobins_ekf_node"}
    context = _context(description, model="crazyflie", rotor_bridge="joint_state", respawn="true")
    nodes = stack.execute(context)
    assert [n.node_executable for n in nodes] == ["velobins_net_node", "velobins_ekf_node", "velobins_rotor_bridge"]
    # A platform starts its bridges (velobins_bringup.vehicle); an argument overrides its choice.
    context = _context(description, model="crazyflie", platform="px4", rotor_bridge="joint_state")
    assert [n.node_executable for n in stack.execute(context)] == [
        "velobins_net_node",
        "velobins_ekf_node",
        "velobins_imu_bridge",
        "velobins_rotor_bridge",
        "velobins_odom_out",
    ]


def test_a_bad_argument_raises_one_line_before_any_node() -> None:
    from launch.actions import OpaqueFunction

    description = _load("drone.launch.py")
    stack = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    for arguments, message in (
        ({"rotor_bridge": "nope"}, "rotor_bridge:=nope: no such preset or file (presets: crazyflie_pwm"),
        ({"imu_bridge": "nope"}, "imu_bridge:=nope: no such preset or file (presets: crazyflie, mavros_imu"),
        ({"platform": "betaflight"}, "platform:=betaflight: no such platform (shipped: ardupilot, crazyflie, px4"),
        ({"odom_out": "ardupilot"}, "odom_out:=ardupilot: must be one of px4, mavros or none"),
        ({"respawn": "yes please"}, "respawn:=yes please: expected true or false"),
        ({"respawn_delay": "-1"}, "respawn_delay:=-1: expected a number of seconds >= 0"),
    ):
        with pytest.raises(ValueError) as info:
            stack.execute(_context(description, model="crazyflie", **arguments))
        assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["drone.launch.py", "replay_eval.launch.py"])
def test_frame_prefix_defaults_from_the_namespace(name: str) -> None:
    description = _load(name)
    for arguments, prefix in (
        ({}, ""),
        ({"namespace": "/drone1"}, "drone1/"),
        ({"namespace": "fleet/drone2"}, "fleet/drone2/"),
        ({"namespace": "/drone1", "frame_prefix": ""}, ""),  # given: global frames on purpose
        ({"namespace": "/drone1", "frame_prefix": "uav1/"}, "uav1/"),
    ):
        context = _context(description, bag="b", **arguments)
        assert context.launch_configurations["frame_prefix"] == prefix, arguments


def test_replay_launch_declares_arguments() -> None:
    from launch.actions import DeclareLaunchArgument

    description = _load("replay_eval.launch.py")
    args = {a.name for a in description.entities if isinstance(a, DeclareLaunchArgument)}
    assert {"bag", "model_path", "output_dir", "rate", "namespace", "params_file", "log_level"} <= args
    assert {"respawn", "respawn_delay", "frame_prefix"} <= args
