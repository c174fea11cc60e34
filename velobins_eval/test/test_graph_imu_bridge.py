"""A held-out flight through the IMU bridge, as Crazyswarm2 sends it (g, deg/s, float32), gives the network
velocities the same flight gives as sensor_msgs/Imu in SI (issue 26 acceptance, to 1e-4 m/s).

Two runs of the installed network node over DDS, on the tiny graph-test model:

* **SI**: the test publishes the flight's IMU as ``sensor_msgs/Imu`` on ``imu`` and its rotors on
  ``rotor_speeds``;
* **bridged**: the IMU goes as the shipped ``crazyflie`` IMU-bridge preset reads it — accelerometer in g
  and gyro in deg/s, rounded to float32 as ``LogDataGeneric.values`` carries them, on ``cf7/imu`` — and
  the installed ``velobins_imu_bridge`` turns it into ``imu``. crazyflie_interfaces is not installable
  here, so the stream's type is ``sensor_msgs/JointState`` (a header and a float array, ``position``,
  standing in for ``values``): everything else is the preset's.

The network's output depends on which samples are in its buffers when an IMU sample arrives, so the
runs feed it the same way, by construction rather than by timing:

1. the node must have heard both streams before the flight starts: warm-up samples, stamped 4000 s
   after the flight, go out until the node's ``/diagnostics`` show it processed the last of them;
2. the flight's first IMU sample then jumps back in time, which makes the node start a new window,
   and the test waits until ``/diagnostics`` count that reset before sending more;
3. rotor samples lead the IMU by :data:`ROTOR_LEAD` samples, so the rotor sample of an IMU stamp has
   always arrived before it (the network reads the rotor at the IMU's stamp);
4. the test never runs more than :data:`AHEAD_S` seconds of flight ahead of the newest estimate, so the
   node's input queues (200 deep) cannot overflow, however slowly it is scheduled.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import graph_fixtures as gf
import numpy as np
import pytest

from velobins_common.constants import STANDARD_GRAVITY

TEST_SECONDS = 8.0
"""Length of the held-out flight [s] (1 s window + 7 s of estimates at 20 Hz)."""
STAMP0 = 1000.0
"""Stamp of the flight's first sample [s]."""
WARMUP_STAMP = 5000.0
"""Stamps of the warm-up samples [s], after the flight: the flight's start is a jump back."""
ROTOR_LEAD = 10
"""Rotor samples sent ahead of the IMU sample with the same index."""
AHEAD_S = 0.5
"""Flight seconds the test may send beyond the newest estimate (at 100 Hz: 50 IMU + 60 rotor samples)."""
TOLERANCE = 1e-4
"""Largest velocity difference between the runs [m/s] (issue 26)."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> gf.GraphSetup:
    return gf.tiny_setup(tmp_path_factory.mktemp("graph_imu_bridge"), test_seconds=TEST_SECONDS)


class Feeder:
    """The test's side of the graph: publishers of the inputs, recorders of estimates and diagnostics."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import QoSProfile
        from sensor_msgs.msg import Imu, JointState

        from velobins_msgs.msg import RotorSpeeds, VelocityEstimate
        from velobins_ros import RELIABLE_QOS

        rclpy.init()
        self.node = rclpy.create_node("graph_imu_bridge_test")
        self.imu_pub = self.node.create_publisher(Imu, "imu", 10)
        self.cf_pub = self.node.create_publisher(JointState, "cf7/imu", 10)
        self.rotor_pub = self.node.create_publisher(RotorSpeeds, "rotor_speeds", 10)
        self.estimates: dict[float, np.ndarray] = {}
        self.diag: dict[str, str] = {}
        self.since = 0.0
        """Diagnostics stamped before this (ROS time [s]) come from an earlier run's node: ignored."""
        self.node.create_subscription(VelocityEstimate, "velobins/velocity", self._on_estimate, QoSProfile(depth=1000))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, RELIABLE_QOS)
        self.Imu, self.JointState, self.RotorSpeeds = Imu, JointState, RotorSpeeds

    def _on_estimate(self, msg: Any) -> None:
        stamp = round(gf.stamp_seconds(msg), 6)
        self.estimates[stamp] = np.array([msg.velocity.x, msg.velocity.y, msg.velocity.z])

    def _on_diagnostics(self, msg: Any) -> None:
        if gf.stamp_seconds(msg) < self.since:
            return
        for status in msg.status:
            if status.name.endswith("velobins_net: velocity network"):
                self.diag = {kv.key: kv.value for kv in status.values}

    def spin_until(self, done, timeout: float, what: str) -> None:
        import rclpy

        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; diagnostics {self.diag}"
            rclpy.spin_once(self.node, timeout_sec=0.02)

    def spin_for(self, seconds: float) -> None:
        import rclpy

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.01)

    def send_imu(self, bridged: bool, t: float, acc: np.ndarray, gyro: np.ndarray) -> None:
        if bridged:  # Crazyswarm2: acc.x/y/z [g], gyro.x/y/z [deg/s], as float32
            msg = self.JointState()
            gf.set_stamp(msg, t)
            values = np.concatenate([acc / STANDARD_GRAVITY, np.degrees(gyro)]).astype(np.float32)
            msg.position = values.astype(np.float64).tolist()
            self.cf_pub.publish(msg)
            return
        msg = self.Imu()
        gf.set_stamp(msg, t)
        msg.header.frame_id = "base_link"
        msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = (float(v) for v in acc)
        msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = (float(v) for v in gyro)
        self.imu_pub.publish(msg)

    def send_rotor(self, t: float, speeds: np.ndarray) -> None:
        msg = self.RotorSpeeds()
        gf.set_stamp(msg, t)
        msg.kind = self.RotorSpeeds.KIND_NORMALIZED
        msg.speeds = [float(v) for v in speeds]
        self.rotor_pub.publish(msg)

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.shutdown()


def newest(estimates: dict[float, np.ndarray]) -> float:
    """Stamp of the newest estimate of the flight (warm-up estimates excluded); 0 before the first."""
    return max((s for s in estimates if s < WARMUP_STAMP), default=0.0)


def warm_up(feeder: Feeder, flight: Any, bridged: bool) -> None:
    """Step 1: send IMU/rotor pairs until the node's diagnostics show it processed the latest pair.

    Rotor sample k is stamped ``1 + k`` ms after its IMU sample, so the node's "rotor lag behind IMU"
    names the pair it processed last; once it names the last pair sent, nothing of the warm-up is
    still on its way (each subscription delivers in order).
    """
    deadline = time.monotonic() + 60.0
    for k in range(1000):
        t = WARMUP_STAMP + 0.01 * k
        lag = 0.001 * (1 + k)
        feeder.send_imu(bridged, t, flight.acc[0], flight.gyro[0])
        feeder.send_rotor(t + lag, flight.rotor[0])
        feeder.spin_for(0.1)
        if feeder.diag.get("rotor lag behind IMU [s]") == f"{-lag:.3f}":
            return
        assert time.monotonic() < deadline, f"the network node never heard the inputs: {feeder.diag}"
    raise AssertionError(f"warm-up: the network node did not catch up: {feeder.diag}")


def feed_flight(feeder: Feeder, flight: Any, bridged: bool) -> dict[float, np.ndarray]:
    """The flight's estimates, fed as the module docstring says (warm-up, reset, rotor lead, flow control)."""
    t = STAMP0 + flight.t - flight.t[0]
    n = len(t)
    warm_up(feeder, flight, bridged)
    feeder.send_imu(bridged, t[0], flight.acc[0], flight.gyro[0])  # 2. jump back: a new window
    feeder.spin_until(lambda: feeder.diag.get("dropped time_jump_reset") == "1", 30.0, "the window reset")
    for j in range(min(ROTOR_LEAD, n)):  # 3. the rotor leads
        feeder.send_rotor(t[j], flight.rotor[j])
    first = t[0] + 1.0  # no estimate before a full 1 s window
    for i in range(1, n):
        # 4. flow control: at most AHEAD_S beyond the newest estimate
        feeder.spin_until(lambda i=i: t[i] <= max(newest(feeder.estimates), first) + AHEAD_S, 30.0, f"{t[i]:.2f} s")
        if i + ROTOR_LEAD < n:
            feeder.send_rotor(t[i + ROTOR_LEAD], flight.rotor[i + ROTOR_LEAD])
        feeder.send_imu(bridged, t[i], flight.acc[i], flight.gyro[i])
    feeder.spin_until(lambda: newest(feeder.estimates) >= t[-1] - 0.05, 30.0, "the last estimate")
    return {s: v for s, v in feeder.estimates.items() if s < WARMUP_STAMP}


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)


@pytest.mark.ros
def test_bridged_crazyswarm_imu_gives_the_si_velocities(setup: gf.GraphSetup, tmp_path: Path, ros_domain: int) -> None:
    from ament_index_python.packages import get_package_share_directory

    from velobins_eval.graph import config_files
    from velobins_ros import executable

    share = Path(get_package_share_directory("velobins_bringup")) / "config"
    net = [str(executable("velobins_net", "velobins_net_node")), "--ros-args", "--params-file", str(config_files()[0])]
    net += ["-p", f"model_path:={setup.checkpoint}", "-p", "diagnostics_period:=0.1"]
    bridge = [str(executable("velobins_bridges", "velobins_imu_bridge")), "--ros-args"]
    bridge += ["--params-file", str(share / "imu_bridge" / "crazyflie.yaml")]
    bridge += ["-p", "input_type:=sensor_msgs/msg/JointState", "-p", "acc_field:=position"]
    bridge += ["-p", "gyro_field:=position", "-p", "input_topic:=cf7/imu"]

    feeder = Feeder()
    runs: dict[str, dict[float, np.ndarray]] = {}
    try:
        for name, bridged in (("si", False), ("bridged", True)):
            feeder.spin_for(0.5)  # what an earlier run's nodes sent is in, then forgotten
            feeder.estimates.clear()
            feeder.diag, feeder.since = {}, time.time()
            procs = {"net": start(net, tmp_path / f"net_{name}.log")}
            if bridged:
                procs["bridge"] = start(bridge, tmp_path / "bridge.log")
            try:
                runs[name] = feed_flight(feeder, setup.flight, bridged)
            finally:
                codes = gf.stop_nodes(procs)
            logs = {p.name: p.read_text() for p in tmp_path.glob("*.log")}
            assert set(codes.values()) == {0}, (codes, logs)
            assert gf.drop_totals(logs[f"net_{name}.log"]) == {"time_jump_reset": 1}, logs
            if bridged:
                assert gf.drop_totals(logs["bridge.log"]) == {}, logs
    finally:
        feeder.close()

    si, bridged = runs["si"], runs["bridged"]
    expected = int((TEST_SECONDS - 1.0) * 20) - 5  # 20 Hz after the 1 s window
    assert len(si) >= expected and sorted(si) == sorted(bridged), (len(si), len(bridged))
    worst = max(float(np.max(np.abs(si[s] - bridged[s]))) for s in si)
    print(f"{len(si)} estimates per run; largest velocity difference {worst:.2e} m/s")  # shown with pytest -s
    assert worst <= TOLERANCE, f"largest velocity difference {worst:.2e} m/s over {len(si)} estimates"
    assert max(float(np.max(np.abs(v))) for v in si.values()) > 0.05  # the model is not constant
