"""Supervision, measured with the real launch system: a node that dies or cannot start ends the launch.

Each test runs ``drone.launch.py`` or ``replay_eval.launch.py`` under the vendored Jazzy launch
system as ``ros2 launch`` would (:mod:`launch_harness`), injects the fault, and checks what a user
sees: the launch's exit status, its one-line reason, and that no process it started is left running.
Waits are on the launch's and the nodes' own log lines with generous timeouts; nothing depends on
how fast the machine is (the one ordering assumption, in the replay test, is stated there).
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import launch_harness as lh
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.skipif(lh.launch_vendor() is None, reason=lh.skip_reason())]

NET_READY = r"\[velobins_net\]: model .* publishing velocity on"
EKF_READY = r"\[velobins_ekf\]: EKF ready"
LAUNCH_TIMEOUT = 180.0
"""Longest wait for a node to be up or the launch to end [s]: minutes, on a loaded 2-core machine."""


@pytest.fixture
def launches(tmp_path: Path, ros_domain: int):
    """Start launches with ``start(file, args)``; every one is ended (and its nodes with it) after the test."""
    runs: list[lh.LaunchRun] = []

    def start(launch_file: str, args: dict[str, str]) -> lh.LaunchRun:
        runs.append(lh.LaunchRun(launch_file, args, cwd=tmp_path))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


def assert_all_gone(run: lh.LaunchRun) -> None:
    pids = run.all_pids()
    assert pids, run.output
    left = [pid for pid in pids if lh.alive(pid)]
    assert not left, f"still running after the launch ended: {left}\n{run.output}"


def user_bridge_preset(folder: Path) -> Path:
    """A user's own rotor-bridge preset: the JointState one with another input topic."""
    share = lh.ROOT / "velobins_bringup" / "config" / "rotor_bridge"
    text = (share / "joint_state.yaml").read_text().replace('input_topic: "joint_states"', 'input_topic: "my_joints"')
    assert "my_joints" in text
    path = folder / "my_bridge.yaml"
    path.write_text(text)
    return path


def test_killed_ekf_stops_the_launch(launches, tmp_path: Path) -> None:
    """kill -9 of the EKF: the launch stops the network and the bridge and exits non-zero, saying why."""
    preset = user_bridge_preset(tmp_path)
    run = launches("drone.launch.py", {"model": "crazyflie", "rotor_bridge": str(preset)})
    run.wait_for(EKF_READY, LAUNCH_TIMEOUT)
    run.wait_for(NET_READY, LAUNCH_TIMEOUT)
    run.wait_for(
        r"sensor_msgs/msg/JointState /my_joints \[velocity\] -> RotorSpeeds", LAUNCH_TIMEOUT
    )  # the user's file
    (ekf,) = run.pids("velobins_ekf_node")
    os.kill(ekf, signal.SIGKILL)

    assert run.wait(LAUNCH_TIMEOUT) != 0, run.output
    assert "velobins_ekf died (killed by SIGKILL): stopping the launch; respawn:=true restarts it instead" in run.output
    assert len(run.pids("velobins_net_node")) == 1 and len(run.pids("velobins_rotor_bridge")) == 1, run.output
    assert "Traceback" not in run.output
    assert_all_gone(run)


def test_respawn_restarts_the_killed_ekf(launches) -> None:
    """respawn:=true: the killed EKF comes back (a new process, ready again); the network runs on."""
    run = launches("drone.launch.py", {"model": "crazyflie", "respawn": "true", "respawn_delay": "0.5"})
    run.wait_for(EKF_READY, LAUNCH_TIMEOUT)
    run.wait_for(NET_READY, LAUNCH_TIMEOUT)
    (ekf,) = run.pids("velobins_ekf_node")
    (net,) = run.pids("velobins_net_node")
    os.kill(ekf, signal.SIGKILL)

    i, _ = run.wait_for(r"velobins_ekf died \(killed by SIGKILL\): restarting it in 0\.5 s", LAUNCH_TIMEOUT)
    run.wait_for(EKF_READY, LAUNCH_TIMEOUT, after=i)
    first, second = run.pids("velobins_ekf_node")
    assert first == ekf and second != ekf and lh.alive(second) and lh.alive(net), run.output
    assert run.pids("velobins_net_node") == [net]

    run.interrupt()  # Ctrl-C: a normal end
    assert run.wait(LAUNCH_TIMEOUT) == 0, run.output
    assert_all_gone(run)


@pytest.mark.parametrize("respawn", ["false", "true"])
def test_a_node_that_cannot_start_stops_the_launch(launches, tmp_path: Path, respawn: str) -> None:
    """A corrupt model: the network exits 2 (cannot start); the launch stops the EKF and exits non-zero,
    also with respawn:=true (a restart would fail the same way)."""
    model = tmp_path / "corrupt.pt"
    model.write_bytes(b"not a checkpoint")
    run = launches("drone.launch.py", {"model_path": str(model), "respawn": respawn, "respawn_delay": "5"})

    assert run.wait(LAUNCH_TIMEOUT) != 0, run.output
    assert "[velobins_net]: cannot start:" in run.output and str(model) in run.output
    assert (
        "velobins_net cannot start (exit status 2, reason in its FATAL line above): stopping the launch" in run.output
    )
    assert len(run.pids("velobins_net_node")) == 1, run.output  # not restarted
    assert "Traceback" not in run.output
    assert_all_gone(run)


def test_a_preset_whose_message_package_is_missing_stops_the_launch(launches) -> None:
    """rotor_bridge:=mavros_esc_status without mavros_msgs installed: the bridge cannot start, and the
    network and EKF do not run on without a rotor stream."""
    import importlib.util

    if importlib.util.find_spec("mavros_msgs") is not None:
        pytest.skip("mavros_msgs is installed here: the preset's bridge would start")
    run = launches("drone.launch.py", {"model": "crazyflie", "rotor_bridge": "mavros_esc_status"})

    assert run.wait(LAUNCH_TIMEOUT) != 0, run.output
    assert "[velobins_rotor_bridge]: cannot start: message package 'mavros_msgs'" in run.output
    assert "velobins_rotor_bridge cannot start (exit status 2" in run.output
    assert len(run.pids("velobins_net_node")) == 1 and len(run.pids("velobins_ekf_node")) == 1, run.output
    assert_all_gone(run)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("mavros_esc_statu", "rotor_bridge:=mavros_esc_statu: no such preset or file (presets: crazyflie_pwm, "),
        ("{yaml}", ": no '/**/velobins_rotor_bridge: ros__parameters:' section"),
    ],
    ids=["typo", "file-without-bridge-section"],
)
def test_a_bad_rotor_bridge_starts_nothing(launches, tmp_path: Path, value: str, message: str) -> None:
    """A preset typo or a YAML file that is not a bridge preset: one ERROR line naming the presets, no node."""
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("/**/velobins_ekf:\n  ros__parameters:\n    odom_rate: 50.0\n")
    run = launches("drone.launch.py", {"model": "crazyflie", "rotor_bridge": value.format(yaml=wrong)})

    assert run.wait(LAUNCH_TIMEOUT) != 0, run.output
    errors = [line for line in run.output.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and message in errors[0], run.output
    assert "mavros_esc_status" in errors[0] and "px4_esc_status" in errors[0]
    assert "process started" not in run.output and "Traceback" not in run.output


@pytest.fixture(scope="module")
def replay_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6 s simulated Crazyflie-like flight (PWM rotors, what the crazyflie model takes) as a bag."""
    from velobins_data.bag import write_bag
    from velobins_data.sim import simulate_flight

    bag = tmp_path_factory.mktemp("replay") / "bag"
    write_bag(simulate_flight("nano", "helix", 6.0, 5), bag)
    return bag


def test_replay_eval_ends_normally_and_stops_on_a_killed_node(launches, tmp_path: Path, replay_bag: Path) -> None:
    """replay_eval.launch.py: the evaluation's end ends the launch with 0 (report written); a killed EKF
    ends it non-zero with the replay, eval and network nodes stopped.

    Ordering assumption of the second part: the EKF is killed when it says it is ready, and the replay
    waits for the network's and the EKF's IMU subscriptions and then 4 s (config/evaluation.yaml)
    before its 6 s of bag, so the flight cannot have ended first; the test checks that it had not.
    """
    report = tmp_path / "report"
    args = {"bag": str(replay_bag), "model": "crazyflie", "output_dir": str(report)}
    run = launches("replay_eval.launch.py", args)
    assert run.wait(LAUNCH_TIMEOUT) == 0, run.output
    assert (report / "metrics.json").is_file(), run.output
    assert_all_gone(run)

    shutil.rmtree(report)
    run = launches("replay_eval.launch.py", args)
    run.wait_for(EKF_READY, LAUNCH_TIMEOUT)
    (ekf,) = run.pids("velobins_ekf_node")
    os.kill(ekf, signal.SIGKILL)
    assert run.wait(LAUNCH_TIMEOUT) != 0, run.output
    stop, _ = run.wait_for(r"velobins_ekf died \(killed by SIGKILL\): stopping the launch; respawn:=true restarts")
    # It ends cleanly, also when the launch stops it while it is still importing (a cold start compiling the
    # .pyc files: velobins_common.entry). "has died" stays accepted for a SIGINT in the interpreter's own
    # start, before any of our code runs; either way it must end after the stop.
    replay_end, _ = run.wait_for(r"\[velobins_replay_node-\d+\]: process has (finished|died)")
    assert replay_end > stop, run.output  # stopped by the launch, not at the end of its flight
    assert len(run.pids("velobins_eval_node")) == 1 and len(run.pids("velobins_net_node")) == 1, run.output
    assert_all_gone(run)
