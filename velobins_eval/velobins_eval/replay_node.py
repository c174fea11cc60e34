"""Replay a VeloBins rosbag2 onto the ROS graph, publishing ``/clock`` from the bag's stamps.

A small stand-in for ``ros2 bag play`` that runs where rosbag2 is not installable (PyPI ROS wheels)
and that knows when a flight ends: it publishes ``True`` on a latched ``finished`` topic after the
last message, so an eval node can write its report and the graph can shut down.

Messages are published as the bag's serialized CDR bytes (no re-encoding) in the order of their
log time, paced against the wall clock by ``rate`` (2.0 = twice real time). ``/clock`` carries the
log time of each batch of messages before the batch is published (bags from ``velobins convert``
log every message at its header stamp), so nodes running with ``use_sim_time`` see consistent stamps. With
``loop`` the flight restarts and bag time jumps backwards, as with ``ros2 bag play --loop``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import rclpy
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rosbags.rosbag2 import Reader
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Bool

from velobins_common.fields import param
from velobins_data import bag
from velobins_ros import LATCHED_QOS, declare_config, run_node, running


@dataclass
class ReplayConfig:
    """Parameters of the replay node (declared from these defaults)."""

    bag: str = ""
    """Bag directory written by ``velobins convert``."""
    rate: float = param(1.0, min=1e-3, max=1000.0)
    """Playback speed factor (wall seconds per bag second = 1 / rate)."""
    start_offset: float = param(0.0, min=0.0)
    """Seconds of the bag to skip at the start."""
    loop: bool = False
    """Restart at the end (bag time jumps backwards on every loop)."""
    publish_clock: bool = True
    """Publish /clock from the bag stamps (for use_sim_time). /clock is global: with several vehicles
    replayed on one domain, let one replay publish it."""
    exit_on_end: bool = True
    """Shut the node down once the flight has been published (not with loop)."""
    start_delay: float = param(1.0, min=0.0, max=600.0)
    """Wall seconds to wait before the first message, so subscribers can discover the publishers."""
    finished_topic: str = "velobins/replay/finished"
    """Latched std_msgs/Bool published True after the last message."""
    wait_for_imu_subscribers: int = param(0, min=0, max=100)
    """Before the first message, wait until imu has this many subscribers (e.g. 2: network + EKF)."""
    wait_for_rotor_subscribers: int = param(0, min=0, max=100)
    """... and rotor_speeds this many (e.g. 1: the network), so no model misses the flight's first rotor samples."""
    wait_for_ground_truth_subscribers: int = param(0, min=0, max=100)
    """... and ground_truth/odometry this many (e.g. 2: an EKF started from ground truth + the eval node)."""
    wait_timeout: float = param(60.0, min=0.0)
    """Longest wait for those subscribers [s]; then the replay starts anyway, with a warning."""


def _sensor_topic(topic: str) -> bool:
    return topic in (bag.TOPIC_IMU, bag.TOPIC_ROTOR)


class ReplayNode(Node):
    """Publishes a VeloBins bag (see module docstring)."""

    def __init__(self) -> None:
        super().__init__("velobins_replay")
        self.config = declare_config(self, ReplayConfig())
        if not self.config.bag:
            raise ValueError("parameter 'bag' is required (a rosbag2 directory)")
        self.messages, self.publishers_by_topic = self._load(Path(self.config.bag))
        self.clock_pub = self.create_publisher(Clock, "/clock", 10)
        self.finished_pub = self.create_publisher(Bool, self.config.finished_topic, LATCHED_QOS)
        self.done = threading.Event()
        self.published = 0
        self._thread = threading.Thread(target=self._play, name="replay", daemon=True)
        self._thread.start()

    def _load(self, path: Path):
        """All messages of the VeloBins topics as (log time [ns], topic, raw CDR), in log-time order."""
        msgs: list[tuple[int, str, bytes]] = []
        pubs = {}
        with Reader(path) as reader:
            conns = [c for c in reader.connections if c.topic in (bag.TOPIC_IMU, bag.TOPIC_ROTOR, bag.TOPIC_GT)]
            if not conns:
                raise ValueError(f"{path}: no VeloBins topics in bag")
            for conn in conns:
                msg_type = _ros_type(conn.msgtype)
                qos = qos_profile_sensor_data if _sensor_topic(conn.topic) else 10
                # The bag's absolute names (/imu) published relative (imu): under a namespace the
                # replay feeds that vehicle's nodes (/drone1/imu).
                pubs[conn.topic] = self.create_publisher(msg_type, conn.topic.lstrip("/"), qos)
            for conn, log_ns, raw in reader.messages(connections=conns):
                msgs.append((log_ns, conn.topic, bytes(raw)))
        # Log-time order, as `ros2 bag play`: header stamps may repeat or jump (faults, loops).
        msgs.sort(key=lambda m: m[0])
        first = msgs[0][0] + round(self.config.start_offset * 1e9)
        msgs = [m for m in msgs if m[0] >= first]
        self.get_logger().info(
            f"replaying {len(msgs)} messages ({(msgs[-1][0] - msgs[0][0]) * 1e-9:.1f} s) from {path} "
            f"at {self.config.rate:g}x"
        )
        return msgs, pubs

    def _wait_for_subscribers(self) -> None:
        """Hold the replay until the configured subscribers are matched (start-up race), or time out."""
        wanted = {
            bag.TOPIC_IMU: self.config.wait_for_imu_subscribers,
            bag.TOPIC_ROTOR: self.config.wait_for_rotor_subscribers,
            bag.TOPIC_GT: self.config.wait_for_ground_truth_subscribers,
        }
        wanted = {topic: n for topic, n in wanted.items() if n > 0 and topic in self.publishers_by_topic}
        if not wanted:
            return
        deadline = time.monotonic() + self.config.wait_timeout

        def missing() -> dict[str, str]:
            counts = {topic: self.publishers_by_topic[topic].get_subscription_count() for topic in wanted}
            return {topic: f"{counts[topic]}/{n}" for topic, n in wanted.items() if counts[topic] < n}

        while running() and missing() and time.monotonic() < deadline:
            time.sleep(0.05)
        if missing():
            self.get_logger().warning(f"subscribers still missing after {self.config.wait_timeout:g} s: {missing()}")
        else:
            self.get_logger().info(f"subscribers matched on {sorted(wanted)}: starting")

    def _play(self) -> None:
        self._wait_for_subscribers()
        time.sleep(self.config.start_delay)
        while running():
            t_bag0 = self.messages[0][0]
            t_wall0 = time.monotonic()
            last_clock = None
            for stamp, topic, raw in self.messages:
                if not running():
                    return
                wait = t_wall0 + (stamp - t_bag0) * 1e-9 / self.config.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if self.config.publish_clock and stamp != last_clock:
                    clock = Clock()
                    clock.clock.sec, clock.clock.nanosec = divmod(stamp, 1_000_000_000)
                    self.clock_pub.publish(clock)
                    last_clock = stamp
                self.publishers_by_topic[topic].publish(raw)
                self.published += 1
            if not self.config.loop:
                break
            self.get_logger().info("loop: restarting the flight (bag time jumps backwards)")
        self.finished_pub.publish(Bool(data=True))
        self.get_logger().info(f"finished: {self.published} messages published")
        self.done.set()


def _ros_type(msgtype: str):
    """The rclpy message class for a 'pkg/msg/Type' name."""
    import importlib

    pkg, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def _spin(node: ReplayNode) -> None:
    """Spin until the flight has been published (unless looping or told to stay up)."""
    while running() and not (node.done.is_set() and node.config.exit_on_end and not node.config.loop):
        rclpy.spin_once(node, timeout_sec=0.1)
    if node.done.is_set():
        time.sleep(0.5)  # let the latched finished flag and the last messages go out


def main(args: list[str] | None = None) -> None:
    run_node(ReplayNode, "velobins_replay", args, spin=_spin)


if __name__ == "__main__":
    main()
