"""What drone.launch.py starts for a vehicle (velobins_bringup.vehicle), and the shipped platform files.

``launch`` is not installable here, so the plan the launch file turns into ``Node`` actions is tested
as plain values; the platform files are checked against the nodes' config dataclasses, and rcl
itself parses each one (a node started with it).
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from velobins_bringup.launch_args import BRIDGE, DRONE_ARGS, EKF, IMU_BRIDGE, NET, ODOM_OUT
from velobins_bringup.vehicle import PLATFORM_NODE, TOPIC_ARGS, VehicleError, load_platform, plan_vehicle

CONFIG = Path(__file__).resolve().parents[1] / "config"
PLATFORMS = sorted(p.stem for p in (CONFIG / "platforms").glob("*.yaml"))


def _configs() -> dict[str, type]:
    from velobins_bridges.imu import ImuBridgeConfig
    from velobins_bridges.odom_out import OdomOutConfig
    from velobins_bridges.rotor import BridgeConfig
    from velobins_ekf.node import EkfNodeConfig
    from velobins_net.node import NetNodeConfig

    return {
        NET: NetNodeConfig,
        EKF: EkfNodeConfig,
        BRIDGE: BridgeConfig,
        IMU_BRIDGE: ImuBridgeConfig,
        ODOM_OUT: OdomOutConfig,
    }


def test_the_three_platforms_are_shipped() -> None:
    assert PLATFORMS == ["ardupilot", "crazyflie", "px4"]


def test_px4_platform_plan() -> None:
    plan = plan_vehicle(CONFIG, {"platform": "px4", "frame_prefix": "drone1/"})
    platform = str(CONFIG / "platforms" / "px4.yaml")
    assert plan.files == (platform,) and plan.params == {}
    bridges = {b.name: b for b in plan.bridges}
    assert set(bridges) == {IMU_BRIDGE, BRIDGE, ODOM_OUT}
    assert bridges[IMU_BRIDGE].files == (str(CONFIG / "imu_bridge" / "px4_sensor_combined.yaml"), platform)
    assert bridges[IMU_BRIDGE].params == {"frame_prefix": "drone1/"}
    assert bridges[BRIDGE].files == (str(CONFIG / "rotor_bridge" / "px4_actuator_motors.yaml"), platform)
    assert bridges[ODOM_OUT].executable == "velobins_odom_out" and bridges[ODOM_OUT].params == {"mode": "px4"}


def test_arguments_override_the_platform() -> None:
    plan = plan_vehicle(CONFIG, {"platform": "ardupilot", "imu_bridge": "none", "rotor_bridge": "joint_state"})
    bridges = {b.name: b for b in plan.bridges}
    assert IMU_BRIDGE not in bridges
    assert bridges[BRIDGE].files[0].endswith("rotor_bridge/joint_state.yaml")
    assert bridges[ODOM_OUT].params == {"mode": "mavros"}
    assert plan_vehicle(CONFIG, {"platform": "ardupilot", "odom_out": "none"}).bridges[-1].name != ODOM_OUT
    bare = plan_vehicle(CONFIG, {"imu_bridge": "mavros_imu", "odom_out": "px4"})
    assert bare.files == () and [b.name for b in bare.bridges] == [IMU_BRIDGE, ODOM_OUT]
    assert plan_vehicle(CONFIG, {}).bridges == ()


def test_topic_arguments_rename_both_ends() -> None:
    args = {"imu_topic": "sensors/imu", "odometry_topic": "odometry/filtered", "rotor_topic": "", "twist_topic": "tw"}
    plan = plan_vehicle(CONFIG, {**args, "platform": "px4"})
    assert plan.params[NET] == {"imu_topic": "sensors/imu", "attitude_topic": "odometry/filtered", "twist_topic": "tw"}
    assert plan.params[EKF] == {"imu_topic": "sensors/imu", "odometry_topic": "odometry/filtered"}
    bridges = {b.name: b for b in plan.bridges}
    assert bridges[IMU_BRIDGE].params == {"frame_prefix": "", "output_topic": "sensors/imu"}
    assert bridges[ODOM_OUT].params == {"mode": "px4", "input_topic": "odometry/filtered"}
    assert "output_topic" not in bridges[BRIDGE].params  # rotor_topic empty: the preset's name


def test_topic_arguments_name_real_parameters() -> None:
    configs = _configs()
    names = {a.name for a in DRONE_ARGS}
    for arg, targets in TOPIC_ARGS.items():
        assert arg in names, f"{arg} is not a launch argument of drone.launch.py"
        for node, param in targets:
            assert param in {f.name for f in dataclasses.fields(configs[node])}, f"{arg}: {node}.{param}"
    for arg in ("platform", "imu_bridge", "rotor_bridge", "odom_out"):
        assert arg in names


def test_bad_arguments_say_what_exists(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"imu_bridge:=px4_imu: no such preset or file \(presets: crazyflie, mavros_imu"
    ):
        plan_vehicle(CONFIG, {"imu_bridge": "px4_imu"})
    wrong = tmp_path / "wrong.yaml"  # a rotor-bridge file given as an IMU preset
    wrong.write_text((CONFIG / "rotor_bridge" / "joint_state.yaml").read_text())
    with pytest.raises(ValueError, match=r"no '/\*\*/velobins_imu_bridge: ros__parameters:' section"):
        plan_vehicle(CONFIG, {"imu_bridge": str(wrong)})
    with pytest.raises(
        VehicleError, match=r"platform:=betaflight: no such platform \(shipped: ardupilot, crazyflie, px4"
    ):
        plan_vehicle(CONFIG, {"platform": "betaflight"})
    with pytest.raises(VehicleError, match="odom_out:=ardupilot: must be one of px4, mavros or none"):
        plan_vehicle(CONFIG, {"odom_out": "ardupilot"})
    bad = tmp_path / "mine.yaml"
    bad.write_text("/**/velobins_platform:\n  ros__parameters:\n    imu_bridge: 3\n")
    with pytest.raises(VehicleError, match=r"mine.yaml: /\*\*/velobins_platform: 'imu_bridge' must be a string"):
        load_platform(str(bad), CONFIG)
    bad.write_text("/**/velobins_net:\n  ros__parameters: {}\n")
    with pytest.raises(VehicleError, match="no '/\\*\\*/velobins_platform: ros__parameters:' section"):
        load_platform(str(bad), CONFIG)
    own = tmp_path / "own.yaml"
    own.write_text("/**/velobins_platform:\n  ros__parameters:\n    odom_out: mavros\n")
    assert load_platform(str(own), CONFIG) == (own, {"odom_out": "mavros"})


@pytest.mark.parametrize("name", PLATFORMS)
def test_platform_files_set_declared_parameters_and_existing_presets(name: str) -> None:
    configs = _configs()
    doc = yaml.safe_load((CONFIG / "platforms" / f"{name}.yaml").read_text())
    for key, body in doc.items():
        assert key.startswith("/**/"), f"{name}.yaml: {key!r} would not apply under a namespace"
        node = key.removeprefix("/**/")
        params = body["ros__parameters"]
        if node == PLATFORM_NODE:
            continue
        fields = {f.name for f in dataclasses.fields(configs[node])}
        assert set(params) <= fields, f"{name}.yaml: {node}: unknown {set(params) - fields}"
    plan = plan_vehicle(CONFIG, {"platform": name})  # every preset it names exists
    assert plan.bridges


def _wait_for_line(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return "".join(lines)
    return "".join(lines)


@pytest.mark.ros
@pytest.mark.parametrize("name", PLATFORMS)
def test_rcl_reads_the_platform_file(name: str, ros_domain: int) -> None:
    """The file, velobins_platform section included, is a parameter file rcl accepts, and the values reach
    the node (odometry out in mavros mode, which needs no autopilot package)."""
    from velobins_ros import executable

    platform = CONFIG / "platforms" / f"{name}.yaml"
    cmd = [str(executable("velobins_bridges", "velobins_odom_out")), "--ros-args", "--params-file", str(platform)]
    proc = subprocess.Popen([*cmd, "-p", "mode:=mavros"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = _wait_for_line(proc, "odometry /velobins/odometry ->", 60.0)
    finally:
        proc.send_signal(signal.SIGINT)
        out += proc.communicate(timeout=20)[0]
    assert "odometry /velobins/odometry -> nav_msgs/Odometry (odom -> base_link)" in out, out
    assert proc.returncode == 0, out
