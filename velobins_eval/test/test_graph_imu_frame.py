"""The network node honours the IMU frame: one flight, published in three IMU frames, gives one velocity.

Four installed ``velobins_net`` nodes (separate processes, namespaces ``/body``, ``/rotated``,
``/frd``, ``/unknown``) load the tiny model of :func:`graph_fixtures.tiny_setup`. This process
publishes the held-out flight's IMU and rotor messages to each in turn (twice real time):

* ``/body``: the IMU in the body frame (``frame_id`` = ``base_link``): the reference;
* ``/rotated``: the IMU rotated by an arbitrary R (``frame_id`` = ``imu_link``), ``imu_to_body`` = R;
* ``/frd``: the IMU in FRD (``frame_id`` = ``imu_frd``) with ``base_link → imu_frd`` on ``/tf_static``;
* ``/unknown``: ``frame_id`` = ``imu_mystery``, neither a parameter nor a transform.

The first three must publish velocities at the same stamps with the same values; the last none
at all, every IMU message counted as an ``imu_frame_unknown`` drop in its exit line.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import graph_fixtures as gf
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_common.frames import FRD_TO_FLU, quaternion_to_matrix
from velobins_data.bag import rotor_kind_code
from velobins_eval.graph import config_files
from velobins_ros import executable

TEST_SECONDS = 5.0
"""Length of the published flight [s] (1 s window, 20 Hz: about 80 estimates per namespace)."""
SPEED = 2.0
"""Publishing speed, flight seconds per wall second."""
UNKNOWN_SECONDS = 1.5
"""Flight seconds published to the namespace whose IMU frame is unknown."""
STAMP_OFFSET = 100.0
"""Added to the flight's stamps (a zero stamp is easy to confuse with 'unset')."""
ROTOR_LEAD = 2
"""Rotor samples published ahead of the IMU, so each window finds its rotor data already there."""
VEL_TOL = 1e-4
"""Agreement of the three velocities [m/s]: the inputs differ only by rounding (float64 rotations
applied and undone, then float32 in the network); measured 0.0 (the float32 inputs come out identical)."""
R_IMU = Rotation.from_euler("zyx", (37.0, -120.0, 15.0), degrees=True)
"""An arbitrary IMU mounting (IMU → body)."""
NAMESPACES = ("body", "rotated", "frd", "unknown")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> gf.GraphSetup:
    return gf.tiny_setup(tmp_path_factory.mktemp("graph_imu_frame"), test_seconds=TEST_SECONDS)


def start_node(ns: str, model: Path, log: Path, extra: list[str]) -> subprocess.Popen:
    """The installed network node under ``/<ns>``, its topics explicitly under the namespace."""
    files = [a for f in config_files()[:1] for a in ("--params-file", str(f))]
    params = {
        "model_path": str(model),
        "imu_topic": f"/{ns}/imu",
        "rotor_topic": f"/{ns}/rotor_speeds",
        "velocity_topic": f"/{ns}/velobins/velocity",
        "twist_topic": f"/{ns}/velobins/twist",
    }
    cmd = [str(executable("velobins_net", "velobins_net_node")), "--ros-args", "-r", f"__ns:=/{ns}", *files]
    for name, value in params.items():
        cmd += ["-p", f"{name}:={value}"]
    with log.open("w") as out:
        return subprocess.Popen([*cmd, *extra], stdout=out, stderr=subprocess.STDOUT)


class Driver(gf.ProbeNode):
    """Publishers (IMU, rotor per namespace; latched /tf_static) and velocity recorders in this process."""

    def __init__(self, domain_id: int) -> None:
        self.velocities: dict[str, list[tuple[float, tuple[float, float, float]]]] = {ns: [] for ns in NAMESPACES}
        super().__init__(domain_id, "imu_frame_graph_driver", depth=1000, diagnostics=False)

    def add_endpoints(self) -> None:
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Imu

        from tf2_msgs.msg import TFMessage
        from velobins_msgs.msg import RotorSpeeds, VelocityEstimate

        data_qos = self.reliable
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.tf_pub = self.node.create_publisher(TFMessage, "/tf_static", latched)
        self.imu_pub = {ns: self.node.create_publisher(Imu, f"/{ns}/imu", data_qos) for ns in NAMESPACES}
        self.rotor_pub = {
            ns: self.node.create_publisher(RotorSpeeds, f"/{ns}/rotor_speeds", data_qos) for ns in NAMESPACES
        }
        self.vel_sub = {
            ns: self.node.create_subscription(
                VelocityEstimate, f"/{ns}/velobins/velocity", self._recorder(ns), data_qos
            )
            for ns in NAMESPACES
        }

    def _recorder(self, ns: str):
        rows = self.velocities[ns]

        def on_velocity(msg: Any) -> None:
            v = msg.velocity
            rows.append((gf.stamp_seconds(msg), (v.x, v.y, v.z)))

        return on_velocity

    def publish_static(self, parent: str, child: str, quaternion: tuple[float, ...]) -> None:
        from geometry_msgs.msg import TransformStamped

        from tf2_msgs.msg import TFMessage

        t = TransformStamped()
        t.header.frame_id, t.child_frame_id = parent, child
        t.transform.translation.z = -0.02  # a lever arm: ignored by design
        r = t.transform.rotation
        r.x, r.y, r.z, r.w = (float(v) for v in quaternion)
        self.tf_pub.publish(TFMessage(transforms=[t]))

    def wait_ready(self, procs: dict[str, subprocess.Popen], timeout: float) -> bool:
        """Every node subscribed to its inputs and publishing its velocity topic (False once one has exited)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and all(p.poll() is None for p in procs.values()):
            if all(
                self.imu_pub[ns].get_subscription_count() >= 1
                and self.rotor_pub[ns].get_subscription_count() >= 1
                and self.vel_sub[ns].get_publisher_count() >= 1
                for ns in NAMESPACES
            ):
                return True
            time.sleep(0.1)
        return False

    def publish_flight(
        self, ns: str, flight: Any, frame_id: str, imu_to_frame: np.ndarray, seconds: float | None = None
    ) -> int:
        """Publish ``flight`` to ``/<ns>`` at SPEED, IMU vectors rotated by ``imu_to_frame``; returns the IMU count."""
        from sensor_msgs.msg import Imu

        from velobins_msgs.msg import RotorSpeeds

        n = len(flight) if seconds is None else int(np.searchsorted(flight.t, flight.t[0] + seconds))
        acc, gyro = flight.acc @ imu_to_frame.T, flight.gyro @ imu_to_frame.T
        kind = rotor_kind_code(flight.rotor_kind)

        def stamp(msg: Any, i: int) -> None:
            gf.set_stamp(msg, float(flight.t[i]) + STAMP_OFFSET)
            msg.header.frame_id = frame_id

        def rotor(i: int) -> None:
            msg = RotorSpeeds()
            stamp(msg, i)
            msg.header.frame_id = "base_link"
            msg.kind = kind
            msg.speeds = [float(x) for x in flight.rotor[i]]
            self.rotor_pub[ns].publish(msg)

        for i in range(min(ROTOR_LEAD, n)):
            rotor(i)
        start = time.monotonic()
        for i in range(n):
            delay = start + (flight.t[i] - flight.t[0]) / SPEED - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if i + ROTOR_LEAD < n:
                rotor(i + ROTOR_LEAD)
            msg = Imu()
            stamp(msg, i)
            a, w = msg.linear_acceleration, msg.angular_velocity
            a.x, a.y, a.z = (float(x) for x in acc[i])
            w.x, w.y, w.z = (float(x) for x in gyro[i])
            self.imu_pub[ns].publish(msg)
        return n

    def settle(self, ns: str, quiet: float = 1.5, timeout: float = 30.0) -> None:
        """Wait until ``ns`` has published nothing new for ``quiet`` seconds."""
        deadline = time.monotonic() + timeout
        count, since = len(self.velocities[ns]), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < quiet:
            time.sleep(0.1)
            if len(self.velocities[ns]) != count:
                count, since = len(self.velocities[ns]), time.monotonic()


@pytest.mark.ros
def test_same_velocity_in_every_imu_frame(setup: gf.GraphSetup, tmp_path: Path, ros_domain: int) -> None:
    flight = setup.flight
    r_frd = quaternion_to_matrix(FRD_TO_FLU)  # FRD → FLU; it is its own inverse
    extra = {"rotated": ["-p", "imu_to_body:=[" + ", ".join(repr(float(x)) for x in R_IMU.as_quat()) + "]"]}
    logs = {ns: tmp_path / f"{ns}.log" for ns in NAMESPACES}
    driver = Driver(ros_domain)
    driver.publish_static("base_link", "imu_frd", FRD_TO_FLU)  # latched: before the nodes start
    procs = {ns: start_node(ns, setup.checkpoint, logs[ns], extra.get(ns, [])) for ns in NAMESPACES}
    published: dict[str, int] = {}
    try:
        ready = driver.wait_ready(procs, timeout=120.0)
        text = {ns: p.read_text(errors="replace")[-2000:] for ns, p in logs.items()}
        assert ready, f"nodes not up: {dict((ns, p.poll()) for ns, p in procs.items())}\n{text}"
        time.sleep(1.0)  # the latched /tf_static reaches the subscribers
        frames = {
            "body": ("base_link", np.eye(3)),
            "rotated": ("imu_link", R_IMU.as_matrix().T),  # body → IMU: the inverse of imu_to_body
            "frd": ("imu_frd", r_frd.T),
        }
        for ns, (frame_id, body_to_imu) in frames.items():
            published[ns] = driver.publish_flight(ns, flight, frame_id, body_to_imu)
            driver.settle(ns)
        published["unknown"] = driver.publish_flight("unknown", flight, "imu_mystery", np.eye(3), UNKNOWN_SECONDS)
        driver.settle("unknown", quiet=1.0)
    finally:
        codes = gf.stop_nodes(procs)  # graceful: the exit line carries the drop totals
        driver.close()
    text = {ns: p.read_text(errors="replace") for ns, p in logs.items()}
    failed = {ns: text[ns][-1500:] for ns, code in codes.items() if code != 0}
    assert not failed, f"exit codes {codes}; logs of the failed: {failed}"

    # the reference: the body-frame IMU gives an estimate every 1/20 s once the 1 s window is full
    ref = dict(driver.velocities["body"])
    expected = (flight.t[published["body"] - 1] - flight.t[0] - 1.0) * 20.0
    assert len(ref) >= 0.9 * expected, (len(ref), expected, text["body"][-1500:])
    for ns in ("rotated", "frd"):
        got = dict(driver.velocities[ns])
        assert sorted(got) == sorted(ref), f"{ns}: {len(got)} stamps vs {len(ref)}\n{text[ns][-1500:]}"
        diff = max(float(np.max(np.abs(np.subtract(got[t], ref[t])))) for t in ref)
        assert diff < VEL_TOL, f"{ns}: velocities differ from the body-frame IMU's by up to {diff:.3g} m/s"
        assert gf.drop_totals(text[ns]).get("imu_frame_unknown", 0) == 0
    assert "imu_to_body parameter" in text["rotated"]
    assert "IMU frame 'imu_frd' -> 'base_link' from /tf_static" in text["frd"]

    # the unknown frame: no estimate, every IMU message a counted drop, the fix in the log
    assert driver.velocities["unknown"] == []
    assert gf.drop_totals(text["unknown"]).get("imu_frame_unknown") == published["unknown"], text["unknown"][-1500:]
    assert "static_transform_publisher" in text["unknown"] and "imu_to_body" in text["unknown"]
