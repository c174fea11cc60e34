"""Real time of the EKF node: CPU, IMU loss and odometry latency at 100 Hz and 1 kHz IMU, 1x/4x/8x replay.

Run: ``source scripts/env.sh && python benchmarks/bench_ekf_node.py [--seconds 5] [--baseline REF] [--floor]``.

Each row starts the EKF node as a separate process with ``config/velobins.yaml`` on a private ROS domain
(odometry at its default ``odom_rate``) and feeds it, from this process, a hovering vehicle's IMU at
``imu_rate`` samples per second of stamp time and velocity estimates at 20 Hz, published ``speed`` times
faster than real time (a replay at 1x, 4x, 8x). After start-up and a warm-up it measures over ``--seconds``
of wall time:

* **CPU**: the node process's ``utime + stime`` (all threads, /proc/<pid>/stat), % of one core;
* **loss**: the share of the IMU samples published in the window that the node's IMU callback never took
  in, counted per stamp at both ends: the feeder records every stamp it publishes, and the node runs with
  its ``on_imu`` wrapped to record every stamp it takes (one list append; the same wrapper for the old node
  and the new, :data:`COUNTING_NODE`), so the count is exact for both; ``taken/fed`` shows the two counts;
* **latency**: from the wall time this process published the IMU sample of an odometry's stamp to the
  wall time the odometry arrived here (end to end: transport both ways, queueing, filter), p50 and p95;
* odometry messages per second of stamp time (the default odom_rate is 50);
* **pub CPU**: this process's CPU share (the publisher and the odometry subscriber): near 100 % it is the
  publisher that falls behind (``IMU fed/s`` below the rate asked), not the node.

``--baseline REF`` runs, beside each row, the node of git revision ``REF`` (its Python packages
extracted to a temporary directory and put first on PYTHONPATH; default: the revision before the
real-time work, 6226601): the old setting and the new paired in one run, under the same load. The
publisher runs in this process and competes with the node for the CPU: compare the two columns of
one run, not runs on different machines. ``--floor`` adds a row for a node that only takes the IMU in
(:data:`FLOOR_NODE`): when it takes every sample while the EKF node loses some, the loss is the EKF node's
own work outgrowing the CPU it gets, not the transport or the publisher.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from velobins_common.constants import STANDARD_GRAVITY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "velobins_eval" / "test"))
import graph_fixtures as gf  # the graph tests' probe: one rclpy side for tests and benchmarks

ROOT = Path(__file__).resolve().parents[1]
VELOCITY_RATE = 20.0
STAMP, VEC = struct.Struct("<iI"), struct.Struct("<3d")
"""builtin_interfaces/Time after the 4-byte CDR header, and a geometry_msgs/Vector3 (little endian)."""
ACC_MARK, GYRO_MARK = (1.25, 2.25, 3.25), (4.25, 5.25, 6.25)
"""Values that locate the two vectors in the serialized template."""
STARTUP = 3.0
"""Wall seconds for the node to start and be discovered."""
WARMUP = 3.0
"""Wall seconds fed before measuring (initialisation, first updates, queues filled)."""
DRAIN = 1.5
"""Wall seconds after the window for the node to take in what is still queued (1000 samples at 8 kHz: 0.125 s)."""
COUNTING_NODE = """
import json, os, sys
from velobins_ekf import node

taken = []
inner = node.EkfNode.on_imu


def on_imu(self, msg):
    stamp = msg.header.stamp
    taken.append(stamp.sec * 1_000_000_000 + stamp.nanosec)
    inner(self, msg)


node.EkfNode.on_imu = on_imu  # the old node subscribes with on_imu, the new one calls it from on_imu_raw
try:
    node.main(sys.argv)
finally:
    with open(os.environ["BENCH_TAKEN"], "w") as f:
        json.dump(taken, f)
"""
"""The EKF node (this tree's or the baseline's, whichever ``velobins_ekf`` imports) with every IMU stamp its
callback takes in recorded, written as JSON to ``$BENCH_TAKEN`` when it stops."""
FLOOR_NODE = """
import json, os, signal, struct, sys
import rclpy
from rclpy.experimental import EventsExecutor
from sensor_msgs.msg import Imu
from velobins_ros import sensor_qos

rclpy.init(args=sys.argv)
node = rclpy.create_node("velobins_ekf")
taken = []
stamp = struct.Struct("<iI")


def on_imu_raw(raw):
    sec, nanosec = stamp.unpack_from(raw, 4)
    taken.append(sec * 1_000_000_000 + nanosec)


node.create_subscription(Imu, "imu", on_imu_raw, sensor_qos(1000), raw=True)
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
executor = EventsExecutor(context=node.context)
executor.add_node(node)
while not stop:
    executor.spin_once(timeout_sec=0.1)
with open(os.environ["BENCH_TAKEN"], "w") as f:
    json.dump(taken, f)
"""
"""``--floor``: a node that only takes the raw IMU in (same QoS and executor as the EKF node, the stamp read and
recorded, nothing else): what rclpy and the DDS cost per sample before the filter does anything, and whether
the transport delivers every sample to a subscriber that keeps up."""
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


class Feeder(gf.ProbeNode):
    """Publishes hover IMU and velocity estimates at a replay speed; records the stamps published and the odometry.

    The rclpy side (private context, node, spinning thread, close) is the graph tests' :class:`ProbeNode`.
    """

    def __init__(self, domain: int) -> None:
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import Imu

        from velobins_msgs.msg import VelocityEstimate

        self.odometry: list[tuple[int, float]] = []  # (stamp ns, wall arrival)
        self.published: dict[int, float] = {}  # IMU stamp ns -> wall time published
        self._stamp_ns: int | None = None  # stamps start at the first sample fed: wall time, as a driver stamps
        super().__init__(domain, "bench_ekf_feeder", depth=1000, diagnostics=False)
        # The IMU goes out serialized, as `ros2 bag play` sends it: one message serialized once, its stamp and
        # vectors written in place per sample (building an rclpy message per sample kept this process busier
        # than the node it feeds at 8 kHz). Markers locate the vectors in the little-endian CDR.
        imu = Imu()
        imu.header.frame_id = "base_link"
        a, w = imu.linear_acceleration, imu.angular_velocity
        (a.x, a.y, a.z), (w.x, w.y, w.z) = ACC_MARK, GYRO_MARK
        raw = serialize_message(imu)
        if raw[1] != 1:
            self.close()
            raise RuntimeError("expected little-endian CDR from this rmw")
        self._imu_raw = bytearray(raw)
        self._acc_at, self._gyro_at = raw.find(VEC.pack(*ACC_MARK)), raw.find(VEC.pack(*GYRO_MARK))
        self._vel = VelocityEstimate()
        self._vel.covariance = (np.eye(3) * 0.01).reshape(-1).tolist()

    def add_endpoints(self) -> None:
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import Imu

        from velobins_msgs.msg import VelocityEstimate

        self.imu_pub = self.node.create_publisher(Imu, "imu", qos_profile_sensor_data)
        self.vel_pub = self.node.create_publisher(
            VelocityEstimate, "velobins/velocity", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        )
        self.node.create_subscription(Odometry, "velobins/odometry", self._on_odom, self.reliable)

    def _on_odom(self, msg: object) -> None:
        self.odometry.append((msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec, time.monotonic()))

    def feed(self, seconds: float, imu_rate: float, speed: float) -> int:
        """Publish for ``seconds`` of wall time: ``imu_rate`` samples per stamp second, ``speed`` x real time."""
        if self._stamp_ns is None:
            self._stamp_ns = self._next_vel_ns = time.time_ns()
        vel, buf, publish = self._vel, self._imu_raw, self.imu_pub.publish
        acc_at, gyro_at = self._acc_at, self._gyro_at
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
                sec, nanosec = divmod(s, 1_000_000_000)
                STAMP.pack_into(buf, 4, sec, nanosec)
                VEC.pack_into(buf, acc_at, x[0], x[1], STANDARD_GRAVITY + x[2])
                VEC.pack_into(buf, gyro_at, 0.1 * x[3], 0.1 * x[4], 0.1 * x[5])
                self.published[s] = time.monotonic()
                publish(bytes(buf))
                n += 1
                if s >= self._next_vel_ns:
                    self._next_vel_ns += vel_ns
                    vel.header.stamp.sec, vel.header.stamp.nanosec = sec, nanosec
                    self.vel_pub.publish(vel)
            time.sleep(max(0.0, start + n / wall_rate - time.monotonic()))


def measure(
    imu_rate: float, speed: float, seconds: float, domain: int, pythonpath: list[Path] | None, node: str = COUNTING_NODE
) -> dict:
    """One node run: CPU %, IMU loss, latency p50/p95 [ms], odometry per stamp second, IMU fed per second."""
    taken_file = Path(tempfile.mkstemp(prefix="bench_ekf_taken_", suffix=".json")[1])
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env["BENCH_TAKEN"] = str(taken_file)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env.get("PYTHONPATH", "")])
    params = ["--ros-args", "--params-file", str(ROOT / "velobins_bringup" / "config" / "velobins.yaml")]
    cmd = [sys.executable, "-c", node, *params]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    feeder = Feeder(domain)
    try:
        time.sleep(STARTUP)
        feeder.feed(WARMUP, imu_rate, speed)
        if proc.poll() is not None:
            raise RuntimeError(f"EKF node exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        cpu0, wall0, n_odom0 = cpu_seconds(proc.pid), time.monotonic(), len(feeder.odometry)
        pub0 = cpu_seconds(os.getpid())
        first = len(feeder.published)
        fed = feeder.feed(seconds, imu_rate, speed)
        cpu1, wall1, pub1 = cpu_seconds(proc.pid), time.monotonic(), cpu_seconds(os.getpid())
        window = list(feeder.published)[first:]  # the stamps published in the window, in order
        time.sleep(DRAIN)  # the node takes in what is queued; the last odometry arrives
        wall = wall1 - wall0
        odom = [(s, arrival) for s, arrival in feeder.odometry[n_odom0:] if s in feeder.published]
        lat = np.array([arrival - feeder.published[s] for s, arrival in odom if arrival <= wall1 + 1.0])
        stamps = np.array([s for s, _ in odom], dtype=np.float64) * 1e-9
        proc.send_signal(signal.SIGINT)  # the node writes the stamps it took as it stops
        proc.wait(timeout=30)
        taken = set(json.loads(taken_file.read_text()))
        n_taken = sum(s in taken for s in window)
        return {
            "cpu": 100.0 * (cpu1 - cpu0) / wall,
            "loss": 1.0 - n_taken / len(window) if window else float("nan"),
            "taken": n_taken,
            "window": len(window),
            "pub_cpu": 100.0 * (pub1 - pub0) / wall,
            "p50": 1e3 * float(np.percentile(lat, 50)) if lat.size else float("nan"),
            "p95": 1e3 * float(np.percentile(lat, 95)) if lat.size else float("nan"),
            "odom": (stamps.size - 1) / (stamps[-1] - stamps[0]) if stamps.size > 1 else 0.0,
            "fed": fed / wall,
        }
    finally:
        feeder.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        taken_file.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured wall seconds per row (default 5)")
    parser.add_argument("--imu-rates", type=float, nargs="+", default=[100.0, 1000.0], help="IMU rates [Hz]")
    parser.add_argument("--speeds", type=float, nargs="+", default=[1.0, 4.0, 8.0], help="replay speed factors")
    parser.add_argument("--baseline", default=BASELINE, help=f"git revision of the old node (default {BASELINE})")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree's node only")
    parser.add_argument("--floor", action="store_true", help="add a row per setting for a node that only takes the IMU")
    args = parser.parse_args()
    domain = random.SystemRandom().randint(101, 200)
    with tempfile.TemporaryDirectory(prefix="bench_ekf_node_") as tmp:
        setups: dict[str, list[Path] | None] = {"new": None}
        if not args.no_baseline:
            setups = {f"old ({args.baseline})": extract(args.baseline, Path(tmp)), "new": None}
        print(f"EKF node, odometry at the default odom_rate, {args.seconds:g} s per row, load {os.getloadavg()[0]:.2f}")
        print(
            f"{'IMU Hz':>7} {'speed':>6} {'node':>16} {'CPU %':>7} {'loss %':>7} {'p50 ms':>8} {'p95 ms':>8} "
            f"{'odom/s':>7} {'IMU fed/s':>10} {'taken/fed':>13} {'pub CPU %':>9}"
        )
        for imu_rate in args.imu_rates:
            for speed in args.speeds:
                rows = [(label, path, COUNTING_NODE) for label, path in setups.items()]
                for label, path, node in rows + ([("take only", None, FLOOR_NODE)] if args.floor else []):
                    r = measure(imu_rate, speed, args.seconds, domain, path, node)
                    print(
                        f"{imu_rate:7g} {speed:5g}x {label:>16} {r['cpu']:7.1f} {100 * r['loss']:7.1f} "
                        f"{r['p50']:8.1f} {r['p95']:8.1f} {r['odom']:7.1f} {r['fed']:10.0f} "
                        f"{r['taken']:>6}/{r['window']:<6} {r['pub_cpu']:9.1f}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
