"""Real time of the EKF node: CPU, IMU loss and odometry latency at 100 Hz and 1 kHz IMU, 1x/4x/8x replay.

Run: ``source scripts/env.sh && python benchmarks/bench_ekf_node.py [--seconds 5] [--baseline REF]``.

Each row starts the EKF node as a separate process with ``config/velobins.yaml`` on a private ROS domain
(odometry at its default ``odom_rate``) and feeds it, from this process, a hovering vehicle's IMU at
``imu_rate`` samples per second of stamp time and velocity estimates at 20 Hz, published ``speed`` times
faster than real time (a replay at 1x, 4x, 8x). After start-up and a warm-up it measures over ``--seconds``
of wall time:

* **CPU**: the node process's ``utime + stime`` (all threads, /proc/<pid>/stat), % of one core;
* **loss**: the share of the IMU messages fed that the node never took in: for this tree's node its own
  count of samples missing from the stamps (``IMU samples lost`` on /diagnostics, exact), for the old
  one 1 − its ``IMU rate [Hz]`` (averaged over the statuses of the window) / the rate fed (±5 %: a rate
  over 2 s windows of arrivals);
* **latency**: from the wall time this process published the IMU sample of an odometry's stamp to the
  wall time the odometry arrived here (end to end: transport both ways, queueing, filter), p50 and p95;
* odometry messages per second of stamp time (the default odom_rate is 50).

``--baseline REF`` runs, beside each row, the node of git revision ``REF`` (its Python packages
extracted to a temporary directory and put first on PYTHONPATH; default: the revision before the
real-time work, 6226601): the old setting and the new paired in one run, under the same load. The
publisher runs in this process and competes with the node for the CPU: compare the two columns of
one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from velobins_common.constants import STANDARD_GRAVITY

ROOT = Path(__file__).resolve().parents[1]
VELOCITY_RATE = 20.0
STARTUP = 3.0
"""Wall seconds for the node to start and be discovered."""
WARMUP = 3.0
"""Wall seconds fed before measuring (initialisation, first updates, queues filled)."""
BASELINE = "6226601"
"""The revision before issue 23's real-time work (EKF node on the wait-set executor, per-message path)."""
PACKAGES = ("velobins_ekf", "velobins_common", "velobins_ros")
"""Python packages of a revision the baseline node imports from that revision."""


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` [s] (all threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def extract(ref: str, out: Path) -> list[Path]:
    """The Python packages of revision ``ref`` under ``out``; the directories to put on PYTHONPATH."""
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", ref], check=True, capture_output=True, text=True
    ).stdout.split()
    inits = [(n, f"/{p}/__init__.py") for p in PACKAGES for n in names if n.endswith(f"/{p}/__init__.py")]
    roots = sorted({n[: -len(tail)] for n, tail in inits if "/test" not in n})
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, *roots], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return [out / r for r in roots]


class Feeder:
    """Publishes hover IMU and velocity estimates at a replay speed; records odometry and diagnostics."""

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
        self.odometry: list[tuple[int, float]] = []  # (stamp ns, wall arrival)
        self.imu_rates: list[tuple[float, float]] = []  # (wall, the node's IMU rate [Hz])
        self.imu_lost: list[tuple[float, int]] = []  # (wall, the node's count of samples missing from the stamps)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 100)
        self.node.create_subscription(
            Odometry, "velobins/odometry", self._on_odom, QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        )
        self._imu, self._vel = Imu(), VelocityEstimate()
        self._imu.header.frame_id = "base_link"
        self._vel.covariance = (np.eye(3) * 0.01).reshape(-1).tolist()
        self.published: dict[int, float] = {}  # IMU stamp ns -> wall time published
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self._stamp_ns = time.time_ns()
        self._next_vel_ns = self._stamp_ns

    def _on_odom(self, msg: object) -> None:
        self.odometry.append((msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec, time.monotonic()))

    def _on_diag(self, msg: object) -> None:
        for status in msg.status:
            for kv in status.values:
                if kv.key == "IMU rate [Hz]":
                    self.imu_rates.append((time.monotonic(), float(kv.value)))
                elif kv.key == "IMU samples lost":  # this tree's node: holes in the stamps, exact
                    self.imu_lost.append((time.monotonic(), int(kv.value)))

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def feed(self, seconds: float, imu_rate: float, speed: float) -> int:
        """Publish for ``seconds`` of wall time: ``imu_rate`` samples per stamp second, ``speed`` x real time."""
        imu, vel = self._imu, self._vel
        a, w = imu.linear_acceleration, imu.angular_velocity
        noise = np.random.default_rng(0).normal(0.0, 0.02, (4096, 6)).tolist()
        step_ns, vel_ns = int(1e9 / imu_rate), int(1e9 / VELOCITY_RATE)
        wall_rate = imu_rate * speed
        start = time.monotonic()
        n = 0
        while True:
            now = time.monotonic()
            if now - start >= seconds:
                return n
            due = int((now - start) * wall_rate) + 1
            while n < due:
                self._stamp_ns += step_ns
                s = self._stamp_ns
                x = noise[n % 4096]
                a.x, a.y, a.z = x[0], x[1], STANDARD_GRAVITY + x[2]
                w.x, w.y, w.z = 0.1 * x[3], 0.1 * x[4], 0.1 * x[5]
                imu.header.stamp.sec, imu.header.stamp.nanosec = divmod(s, 1_000_000_000)
                self.published[s] = time.monotonic()
                self.imu_pub.publish(imu)
                n += 1
                if s >= self._next_vel_ns:
                    self._next_vel_ns += vel_ns
                    vel.header.stamp = imu.header.stamp
                    self.vel_pub.publish(vel)
            time.sleep(max(0.0, start + n / wall_rate - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()


def measure(imu_rate: float, speed: float, seconds: float, domain: int, pythonpath: list[Path] | None) -> dict:
    """One node run: CPU %, IMU loss, latency p50/p95 [ms], odometry per stamp second, IMU fed per second."""
    from velobins_ros import executable

    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    params = ["--ros-args", "--params-file", str(ROOT / "velobins_bringup" / "config" / "velobins.yaml")]
    if pythonpath is None:
        cmd = [str(executable("velobins_ekf", "velobins_ekf_node")), *params]
    else:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-m", "velobins_ekf.node", *params]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    feeder = Feeder(domain)
    try:
        time.sleep(STARTUP)
        feeder.feed(WARMUP, imu_rate, speed)
        if proc.poll() is not None:
            raise RuntimeError(f"EKF node exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        cpu0, wall0, n_odom0 = cpu_seconds(proc.pid), time.monotonic(), len(feeder.odometry)
        fed = feeder.feed(seconds, imu_rate, speed)
        cpu1, wall1 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(1.0)  # the last odometry and the diagnostics of the window arrive
        wall = wall1 - wall0
        odom = [(s, arrival) for s, arrival in feeder.odometry[n_odom0:] if s in feeder.published]
        lat = np.array([arrival - feeder.published[s] for s, arrival in odom if arrival <= wall1 + 1.0])
        stamps = np.array([s for s, _ in odom], dtype=np.float64) * 1e-9
        taken = [r for t, r in feeder.imu_rates if wall0 + 2.0 <= t <= wall1 + 0.5]  # a full 2 s rate window
        fed_rate = fed / wall
        loss = 1.0 - float(np.mean(taken)) / fed_rate if taken else float("nan")
        before = [n for t, n in feeder.imu_lost if t <= wall0]
        after = [n for t, n in feeder.imu_lost if t >= wall1 + 0.5]
        if before and after:  # the node counts the holes in the stamps: the exact loss over the window
            loss = (after[0] - before[-1]) / fed
        return {
            "cpu": 100.0 * (cpu1 - cpu0) / wall,
            "loss": loss,
            "p50": 1e3 * float(np.percentile(lat, 50)) if lat.size else float("nan"),
            "p95": 1e3 * float(np.percentile(lat, 95)) if lat.size else float("nan"),
            "odom": (stamps.size - 1) / (stamps[-1] - stamps[0]) if stamps.size > 1 else 0.0,
            "fed": fed_rate,
        }
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
    parser.add_argument("--seconds", type=float, default=5.0, help="measured wall seconds per row (default 5)")
    parser.add_argument("--imu-rates", type=float, nargs="+", default=[100.0, 1000.0], help="IMU rates [Hz]")
    parser.add_argument("--speeds", type=float, nargs="+", default=[1.0, 4.0, 8.0], help="replay speed factors")
    parser.add_argument("--baseline", default=BASELINE, help=f"git revision of the old node (default {BASELINE})")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree's node only")
    args = parser.parse_args()
    domain = random.SystemRandom().randint(101, 200)
    with tempfile.TemporaryDirectory(prefix="bench_ekf_node_") as tmp:
        setups: dict[str, list[Path] | None] = {"new": None}
        if not args.no_baseline:
            setups = {f"old ({args.baseline})": extract(args.baseline, Path(tmp)), "new": None}
        print(f"EKF node, odometry at the default odom_rate, {args.seconds:g} s per row, load {os.getloadavg()[0]:.2f}")
        print(
            f"{'IMU Hz':>7} {'speed':>6} {'node':>16} {'CPU %':>7} {'loss %':>7} {'p50 ms':>8} {'p95 ms':>8} "
            f"{'odom/s':>7} {'IMU fed/s':>10}"
        )
        for imu_rate in args.imu_rates:
            for speed in args.speeds:
                for label, path in setups.items():
                    r = measure(imu_rate, speed, args.seconds, domain, path)
                    print(
                        f"{imu_rate:7g} {speed:5g}x {label:>16} {r['cpu']:7.1f} {100 * r['loss']:7.1f} "
                        f"{r['p50']:8.1f} {r['p95']:8.1f} {r['odom']:7.1f} {r['fed']:10.0f}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
