"""Fault injection on the live EKF node: stamp jumps, a long gap, a lost network, a wrong IMU unit or frame.

The installed EKF node runs as its own process with ``config/velobins.yaml`` (``init_mode: align``).
This process plays a simulated flight in real time: its IMU at 100 Hz and, as a network would, its
ground-truth body velocity with N(0, 0.05²) noise and that covariance at 20 Hz; and records
``/diagnostics`` and the odometry. A message is stamped with the wall time it is due (plus an offset:
:class:`graph_fixtures.RealTime`). Stamped on sending instead, one 0.2 s stall of the publishing thread
in the set_pose phase gave the failure seen under load: the burst after it carried 0.2 s of flight in a
few milliseconds of stamps, the filter's velocity fell behind the flight's and the node rightly raised
its NIS test (mean 4.50 > 4.07). Phases, in order:

1. **nominal**: the filter aligns itself and tracks: OK.
2. **forward jump**: the stamps jump 10 s ahead (a clock reset; no time passed). WARN naming the jump
   and the hold; the filter never propagates across it (before: one 10 s step, 66 m). A hold cannot
   tell a jump from a gap, so the position σ grows by |v| · 10 s: "position uncertain" follows the
   event in the message, and stays once the event is old (WARN or ERROR).
3. **set_pose**: the ground-truth pose on ``set_pose`` restores it: OK again. The pose is the truth of
   0.5 s before, stamped then (a slow localiser): the filter sets it at its stamp (set at its arrival
   instead, the attitude would be off by half a second of turning and the NIS test would raise).
4. **long gap**: nothing for 1.5 s (time passes): "no IMU" WARN, then the hold over the gap is reported.
   The state the hold kept is off by 1.5 s of flight, more than its covariance says, so the NIS test may
   raise next: if it does, it names the gap, not the IMU and the network.
5. **rotor loss**: the network's output stops (what a lost rotor stream does to the network node:
   test_graph_health): "no fused update" WARN, then ERROR after ``update_error_after``.
6. **recovery**: the velocities come back: no longer dead reckoning.
7. **backward jump**: the stamps go 10 s back (a bag loop): the filter restarts and aligns again.
8. **IMU in g** after the ``reset`` service: ERROR naming g units; the filter refuses to start.
9. **FRD as FLU**: ERROR naming the FRD frame; the filter refuses to start.
10. **fixed**: the IMU is right again: it starts, OK.

Odometry never jumps by more than what the code allows, per pair of consecutive messages (m0, m1) of one
run of the filter (a restart or a set pose starts another), with ``N = 30`` a bound on the NIS (χ²₃ tail
10⁻⁶: the simulated network's noise is what its covariance says):

* propagation: over the stamp interval ``Δt`` the filter propagates at most ``τ = min(Δt, 0.25 s)`` (no
  interval longer than ``max_imu_interval`` is ever propagated: a hold keeps the position), moving at most
  ``(|v| + σ_v √N) τ + ½ a τ²``: ``|v|`` the larger speed of the two messages' twists, ``σ_v √N`` what a
  velocity update can add to it, ``a ≤ 30 m/s²`` (the simulated flight's specific force stays near g);
* updates: each fused velocity moves the position by ``|c K y| ≤ √(c P Hᵀ S⁻¹ H P cᵀ) √NIS ≤ σ_p √N``
  (Cauchy–Schwarz; ``P Hᵀ S⁻¹ H P ⪯ P``). A hold's inflation is block-diagonal and H has no position
  column, so the pre-hold position σ still bounds it: ``σ_p = σ_p(m0) + (σ_v(m0) + σ_hold) τ`` (m0's σ
  grown over the propagation; ``σ_hold = init_sigma_vel + gap_accel_sigma Δt`` bounds what a hold over
  the interval adds to the velocity σ). At most ``n`` updates: the velocity stamps in ``(t0, t1]`` + 1.

Bound: ``(|v| + σ_v √N) τ + 15 τ² + n σ_p √N`` (before the fix, a 10 s forward jump moved it 66 m).

Levels are read from the statuses inside each phase, after a settling time; phases are long enough for a
machine under load (two CPU-bound processes beside the test), and nothing depends on one status' timing.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import graph_fixtures as gf
import numpy as np
import pytest

from velobins_common.constants import STANDARD_GRAVITY
from velobins_ekf.config import EkfConfig
from velobins_eval.graph import config_files
from velobins_ros import executable

pytestmark = pytest.mark.ros

RATE, VEL_RATE = 100.0, 20.0
NOISE = 0.05
"""Standard deviation of the simulated network's velocity error [m/s] (and its covariance's)."""
DIAG = 0.2
"""diagnostics_period of the node in this test [s]."""
EVENT = 1.5
"""event_report_time of the node in this test [s] (velobins.yaml: 5)."""
JUMP = 10.0
"""Size of the stamp jumps [s]."""
GAP = 1.5
"""Length of the IMU gap [s]."""
EKF = "/velobins_ekf: EKF"
NIS_MAX, ACC_MAX, TAU_MAX = 30.0, 30.0, 0.25
INIT_SIGMA_VEL, GAP_ACCEL_SIGMA = EkfConfig().init_sigma_vel, EkfConfig().gap_accel_sigma
"""filter.init_sigma_vel [m/s] and filter.gap_accel_sigma [m/s²] (velobins.yaml is generated from these
defaults): a hold over Δt adds at most ``init_sigma_vel + gap_accel_sigma Δt`` to the velocity σ."""


class Probe(gf.ProbeNode):
    """IMU, velocity and set_pose publishers, the reset client, and an odometry recorder (and /diagnostics)."""

    def __init__(self, domain_id: int, flight: Any) -> None:
        self.flight = flight
        self.odometry: list[tuple[float, Any]] = []  # (wall, message)
        self.marks: list[tuple[str, float]] = []  # (what, wall): restarts and set poses split the odometry
        self.vel_stamps: list[float] = []
        self.sent: deque[tuple[int, float]] = deque(maxlen=200)  # (flight sample, stamp) of the last IMU
        self.clock = gf.RealTime(RATE)
        self.offset = 0.0  # stamp = the wall time a message is due + offset
        self.rng = np.random.default_rng(0)
        super().__init__(domain_id, "fault_probe", depth=1000)

    def add_endpoints(self) -> None:
        from geometry_msgs.msg import PoseWithCovarianceStamped
        from nav_msgs.msg import Odometry
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Imu
        from std_srvs.srv import Trigger

        from velobins_msgs.msg import VelocityEstimate

        self.imu_pub = self.node.create_publisher(Imu, "/imu", qos_profile_sensor_data)
        self.vel_pub = self.node.create_publisher(VelocityEstimate, "/velobins/velocity", self.reliable)
        self.pose_pub = self.node.create_publisher(PoseWithCovarianceStamped, "/set_pose", self.reliable)
        self.reset = self.node.create_client(Trigger, "/reset")
        self.Trigger, self.Pose = Trigger, PoseWithCovarianceStamped
        self.imu, self.vel = Imu(), VelocityEstimate()
        self.imu.header.frame_id = "base_link"
        self.vel.covariance = (np.eye(3) * NOISE**2).reshape(-1).tolist()
        self.node.create_subscription(Odometry, "/velobins/odometry", self._on_odom, self.reliable)

    def _on_odom(self, msg: Any) -> None:
        self.odometry.append((time.monotonic(), msg))

    def play(self, seconds: float, imu: str = "flu", velocity: bool = True) -> None:
        """Publish the flight in real time for ``seconds`` (``imu``: 'flu', 'g' units, 'frd' frame)."""
        f, imu_msg, vel = self.flight, self.imu, self.vel
        every = round(RATE / VEL_RATE)
        for i, due in self.clock.play(seconds):
            k, stamp = i % len(f.t), due + self.offset
            acc, gyro = f.acc[k].copy(), f.gyro[k].copy()
            if imu == "g":
                acc = acc / STANDARD_GRAVITY
            elif imu == "frd":
                acc, gyro = acc * [1.0, -1.0, -1.0], gyro * [1.0, -1.0, -1.0]
            gf.set_stamp(imu_msg, stamp)
            a, w = imu_msg.linear_acceleration, imu_msg.angular_velocity
            a.x, a.y, a.z = (float(x) for x in acc)
            w.x, w.y, w.z = (float(x) for x in gyro)
            self.imu_pub.publish(imu_msg)
            self.sent.append((k, stamp))
            if velocity and i % every == 0:
                rot = _rot(f.q[k])
                z = rot.T @ f.v[k] + self.rng.normal(0.0, NOISE, 3)
                gf.set_stamp(vel, stamp)
                self.vel_stamps.append(gf.stamp_seconds(vel))
                vel.velocity.x, vel.velocity.y, vel.velocity.z = (float(x) for x in z)
                self.vel_pub.publish(vel)

    def pause(self, seconds: float) -> None:
        """Nothing published for ``seconds`` while the flight goes on (the next :meth:`play` catches it up)."""
        time.sleep(seconds)

    def set_pose(self, age: float) -> None:
        """Publish the true pose of the IMU sample sent ``age`` seconds ago, with that sample's stamp."""
        f = self.flight
        k, stamp = min(self.sent, key=lambda sent: abs(sent[1] - (self.sent[-1][1] - age)))
        msg = self.Pose()
        msg.header.frame_id = "odom"
        gf.set_stamp(msg, stamp)
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        p.x, p.y, p.z = (float(x) for x in f.p[k])
        q.x, q.y, q.z, q.w = (float(x) for x in f.q[k])
        msg.pose.covariance = np.diag([0.01, 0.01, 0.01, 1e-4, 1e-4, 1e-4]).reshape(-1).tolist()
        self.marks.append(("set_pose", time.monotonic()))
        self.pose_pub.publish(msg)

    def call_reset(self) -> Any:
        assert self.reset.wait_for_service(timeout_sec=10.0), "/reset not available"
        self.marks.append(("reset", time.monotonic()))
        future = self.reset.call_async(self.Trigger.Request())
        self.wait_for(future.done, 10.0, "/reset")
        return future.result()


def _rot(q_xyzw: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_quat(q_xyzw).as_matrix()


@pytest.fixture(scope="module")
def flight():
    from velobins_data.sim import simulate_flight

    return simulate_flight("nano", "circle", 40.0, 5)


def test_faults_are_named_and_odometry_never_jumps(ros_domain: int, flight: Any, tmp_path: Path) -> None:
    import subprocess

    params = {"diagnostics_period": DIAG, "event_report_time": EVENT}
    cmd = [str(executable("velobins_ekf", "velobins_ekf_node")), "--ros-args", "--params-file", str(config_files()[0])]
    for key, value in params.items():
        cmd += ["-p", f"{key}:={value}"]
    log = tmp_path / "ekf.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    probe = Probe(ros_domain, flight)
    phases: dict[str, tuple[float, float]] = {}

    def phase(name: str, run) -> None:
        t0 = time.monotonic()
        run()
        phases[name] = (t0, time.monotonic())

    try:
        probe.wait_for(lambda: EKF in probe.diags, 60.0, "the EKF's diagnostics")
        probe.wait_for(lambda: probe.imu_pub.get_subscription_count() >= 1, 10.0, "the IMU subscriber")
        phase("nominal", lambda: probe.play(4.0))

        def forward() -> None:
            probe.offset += JUMP
            probe.play(3.0)

        phase("forward jump", forward)

        def set_pose() -> None:
            probe.set_pose(age=0.5)
            probe.play(3.0)

        phase("set_pose", set_pose)
        phase("gap", lambda: probe.pause(GAP))
        phase("after gap", lambda: probe.play(1.0))
        phase("rotor loss", lambda: probe.play(3.0, velocity=False))
        phase("recovery", lambda: probe.play(3.0))

        def backward() -> None:
            probe.marks.append(("backward", time.monotonic()))
            probe.offset -= JUMP
            probe.play(2.5)

        phase("backward jump", backward)

        def in_g() -> None:
            response = probe.call_reset()
            assert response.success and "initialises again" in response.message, response
            probe.play(2.5, imu="g")

        phase("IMU in g", in_g)
        phase("FRD as FLU", lambda: probe.play(2.5, imu="frd"))
        phase("fixed", lambda: probe.play(3.0))
        time.sleep(0.3)
    finally:
        probe.close()
        codes = gf.stop_nodes({"velobins_ekf_node": proc})
    diags, text = probe.diags[EKF], log.read_text()
    assert codes == {"velobins_ekf_node": 0}, (codes, text[-3000:])

    def inside(name: str, settle: float = 0.0, until: float | None = None) -> list[gf.Diag]:
        t0, t1 = phases[name]
        return [d for d in diags if t0 + settle <= d.wall <= (t0 + until if until is not None else t1)]

    def last(name: str) -> gf.Diag:
        found = inside(name)
        assert found, f"no status in phase {name}"
        return found[-1]

    assert (last("nominal").level, last("nominal").message) == (0, "tracking"), last("nominal")
    jumped = [d for d in inside("forward jump", until=EVENT) if "jumped forward" in d.message]
    assert jumped and jumped[0].level >= 1, inside("forward jump")
    assert f"jumped forward {JUMP:.0f}." in jumped[0].message and "position uncertain" in jumped[0].message, jumped
    assert "filter held" in jumped[0].message and int(jumped[-1].values["imu gaps"]) >= 1
    late = last("forward jump")
    assert late.level >= 1 and late.message.startswith("position uncertain"), late
    assert (last("set_pose").level, last("set_pose").message) == (0, "tracking"), last("set_pose")
    assert any(d.message.startswith("pose set by") for d in inside("set_pose")), inside("set_pose")
    assert any(d.level == 1 and d.message.startswith("no IMU on /imu for") for d in inside("gap", settle=0.7))
    assert any(f"IMU gap of {GAP:.1f}" in d.message and d.level >= 1 for d in inside("after gap")), inside("after gap")
    inconsistent = [d.message for d in inside("after gap") + inside("rotor loss") if "filter inconsistent" in d.message]
    print(f"NIS alarms after the gap: {len(inconsistent)}", inconsistent[:1])
    assert all(f"after the IMU gap of {GAP:.1f}" in m for m in inconsistent), inconsistent  # the hold, not the IMU
    loss = inside("rotor loss", settle=1.0)
    assert loss and all("no fused update" in d.message for d in loss), [(d.level, d.message) for d in loss]
    assert loss[0].level == 1 and loss[-1].level == 2 and "IMU-only dead reckoning" in loss[-1].message, loss
    assert not any("no fused update" in d.message for d in inside("recovery", settle=1.0)), inside("recovery")
    back = inside("backward jump")
    assert any("filter restarted: IMU time jumped back" in d.message for d in back), back
    assert back[-1].values["initialised"] == "true", back[-1]
    g = inside("IMU in g", settle=1.5)
    assert g and all(d.level == 2 and "in g, not m/s²" in d.message for d in g), g
    assert g[-1].values["initialised"] == "false"
    frd = inside("FRD as FLU", settle=1.5)
    assert frd and all(d.level == 2 and "FRD" in d.message for d in frd), frd
    assert frd[-1].values["initialised"] == "false"
    fixed = last("fixed")
    assert fixed.values["initialised"] == "true" and fixed.level <= 1, fixed
    assert "IMU time jumped back" in text and "jumped forward" in text

    # odometry: no jump beyond the bound of the module docstring, within one run of the filter
    cuts = sorted(w for _, w in probe.marks)
    stamps = sorted(probe.vel_stamps)
    checked, worst = 0, 0.0
    for (w0, m0), (w1, m1) in zip(probe.odometry, probe.odometry[1:], strict=False):
        if any(w0 - 0.5 <= c <= w1 + 0.5 for c in cuts) or gf.stamp_seconds(m1) <= gf.stamp_seconds(m0):
            continue  # a restart or a set pose between them (or a new run's first message)
        t0, t1 = gf.stamp_seconds(m0), gf.stamp_seconds(m1)
        tau = min(t1 - t0, TAU_MAX)
        sigma_v = math.sqrt(max(m0.twist.covariance[i * 7] for i in range(3)))
        sigma_hold = INIT_SIGMA_VEL + GAP_ACCEL_SIGMA * (t1 - t0)
        sigma_p = math.sqrt(max(m0.pose.covariance[i * 7] for i in range(3))) + (sigma_v + sigma_hold) * tau
        speed = max(np.linalg.norm(_twist(m)) for m in (m0, m1)) + sigma_v * math.sqrt(NIS_MAX)
        n = bisect.bisect_right(stamps, t1) - bisect.bisect_right(stamps, t0) + 1
        bound = speed * tau + 0.5 * ACC_MAX * tau * tau + n * sigma_p * math.sqrt(NIS_MAX)
        jump = float(np.linalg.norm(_position(m1) - _position(m0)))
        assert jump <= bound, f"odometry jumped {jump:.3f} m in {t1 - t0:.3f} s (bound {bound:.3f} m)"
        worst = max(worst, jump / bound)
        checked += 1
    assert checked > 500, checked
    print(f"odometry: {checked} consecutive pairs checked, largest jump / bound {worst:.3f}")


def _twist(m: Any) -> np.ndarray:
    v = m.twist.twist.linear
    return np.array([v.x, v.y, v.z])


def _position(m: Any) -> np.ndarray:
    p = m.pose.pose.position
    return np.array([p.x, p.y, p.z])
