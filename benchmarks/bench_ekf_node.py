"""CPU of the EKF node at a 1 kHz IMU, per ``odom_rate``: what publishing odometry + TF costs.

Run: ``source scripts/env.sh && python benchmarks/bench_ekf_node.py [--seconds 10] [--rates 0 200 100 50]``.

For each ``odom_rate`` the installed ``velobins_ekf_node`` (as ``ros2 run`` starts it) is started
with ``config/velobins.yaml`` on a private ROS domain; this process publishes a hovering vehicle's
IMU at 1 kHz and velocity estimates at 20 Hz in real time (stamps = wall time), waits for the
filter to initialise, then measures over ``--seconds`` the node process's CPU time (``utime +
stime`` from ``/proc/<pid>/stat``, all its threads) and the odometry messages it publishes.
Prints one row per rate: CPU % of one core, odometry messages per second, the IMU rate fed, and
the IMU rate the node reports taking in on ``/diagnostics`` (below the fed rate: the node fell
behind and its best-effort queue dropped samples, so its CPU figure is capped, not its cost). The
publisher runs in this process: on a busy or small machine it competes with the node, so compare
rows of one run, on an otherwise idle machine where possible.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from velobins_common.constants import STANDARD_GRAVITY

ROOT = Path(__file__).resolve().parents[1]
IMU_RATE = 1000.0
VELOCITY_RATE = 20.0
WARMUP = 3.0
"""Seconds fed before measuring (start-up, gravity alignment, first velocity update)."""


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` [s] (all threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Feeder:
    """Publishes hover IMU at 1 kHz and velocity estimates at 20 Hz; counts odometry messages."""

    def __init__(self, domain: int) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from rclpy.signals import SignalHandlerOptions
        from sensor_msgs.msg import Imu

        from velobins_msgs.msg import VelocityEstimate

        self.ctx = Context()
        rclpy.init(args=[], context=self.ctx, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("bench_ekf_feeder", context=self.ctx)
        self.imu_pub = self.node.create_publisher(Imu, "imu", qos_profile_sensor_data)
        self.vel_pub = self.node.create_publisher(
            VelocityEstimate, "velobins/velocity", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        )
        self.odometry = 0
        self.node_imu_rate = float("nan")
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.node.create_subscription(
            Odometry, "velobins/odometry", self._on_odom, QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        )
        self._imu, self._vel = Imu(), VelocityEstimate()
        self._imu.header.frame_id = "base_link"
        self._vel.covariance = (np.eye(3) * 0.01).reshape(-1).tolist()
        self._rng = np.random.default_rng(0)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _on_odom(self, msg: object) -> None:
        self.odometry += 1

    def _on_diag(self, msg: object) -> None:
        for status in msg.status:  # the node's own count of the IMU messages it took in
            for kv in status.values:
                if kv.key == "IMU rate [Hz]":
                    self.node_imu_rate = float(kv.value)

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _stamp(self, msg: object, t: float) -> None:
        ns = int(t * 1e9)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)

    def feed(self, seconds: float) -> int:
        """Publish for ``seconds`` of wall time at the IMU rate (catching up after a late wake-up)."""
        imu, vel = self._imu, self._vel
        start = time.monotonic()
        n, next_vel = 0, 0.0
        while True:
            now = time.monotonic()
            if now - start >= seconds:
                return n
            due = int((now - start) * IMU_RATE) + 1
            while n < due:
                t = time.time()
                noise = self._rng.normal(0.0, 0.02, 6)
                a, w = imu.linear_acceleration, imu.angular_velocity
                a.x, a.y, a.z = float(noise[0]), float(noise[1]), STANDARD_GRAVITY + float(noise[2])
                w.x, w.y, w.z = (float(x) * 0.1 for x in noise[3:])
                self._stamp(imu, t)
                self.imu_pub.publish(imu)
                n += 1
                if n / IMU_RATE >= next_vel:
                    next_vel += 1.0 / VELOCITY_RATE
                    self._stamp(vel, t)
                    self.vel_pub.publish(vel)
            time.sleep(max(0.0, start + n / IMU_RATE - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()


def measure(odom_rate: float, seconds: float, domain: int) -> tuple[float, float, float, float]:
    """CPU % of one core, odometry messages/s, IMU messages/s fed, and IMU messages/s the node took in
    (its last /diagnostics status during the feed: the last 2 s) of one node run at ``odom_rate``."""
    from velobins_ros import executable

    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    cmd = [
        str(executable("velobins_ekf", "velobins_ekf_node")),
        "--ros-args",
        "--params-file",
        str(ROOT / "velobins_bringup" / "config" / "velobins.yaml"),
        "-p",
        f"odom_rate:={odom_rate!r}",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    feeder = Feeder(domain)
    try:
        time.sleep(2.0)  # node start-up and discovery
        feeder.feed(WARMUP)
        if proc.poll() is not None:
            raise RuntimeError(f"EKF node exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        cpu0, odom0, wall0 = cpu_seconds(proc.pid), feeder.odometry, time.monotonic()
        fed = feeder.feed(seconds)
        cpu1, odom1, wall1, taken = cpu_seconds(proc.pid), feeder.odometry, time.monotonic(), feeder.node_imu_rate
        wall = wall1 - wall0
        return 100.0 * (cpu1 - cpu0) / wall, (odom1 - odom0) / wall, fed / wall, taken
    finally:
        feeder.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per rate (default 10)")
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 200.0, 100.0, 50.0], help="odom_rate values")
    args = parser.parse_args()
    domain = random.SystemRandom().randint(101, 200)
    print(f"EKF node, {IMU_RATE:g} Hz IMU + {VELOCITY_RATE:g} Hz velocity, {args.seconds:g} s per row")
    print(f"{'odom_rate':>10} {'CPU %':>8} {'odom msg/s':>11} {'IMU fed/s':>10} {'IMU taken/s':>12}")
    for rate in args.rates:
        cpu, odom, fed, taken = measure(rate, args.seconds, domain)
        label = "0 (every)" if rate == 0 else f"{rate:g}"
        print(f"{label:>10} {cpu:8.1f} {odom:11.1f} {fed:10.1f} {taken:12.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
