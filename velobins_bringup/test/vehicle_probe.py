"""The autopilot side of the launch tests: a simulated flight's IMU and rotor speeds in, odometry out.

:class:`Vehicle` publishes in real time (looped; each sample stamped with the wall time it is due:
:class:`graph_fixtures.RealTime`) into a launch run by :mod:`launch_harness` and records the odometry
that comes back. It is a :class:`graph_fixtures.ProbeNode`
(velobins_eval's live-graph probe: own rclpy context, node spun on a daemon thread), so the two kinds of
live test share one way of joining a graph.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

# velobins_eval's test helpers: the root conftest.py puts them on sys.path
from graph_fixtures import ProbeNode, RealTime, set_stamp


class Vehicle(ProbeNode):
    """The autopilot side in this process: publishes ``flight`` (IMU + rotor speeds, wall-clock stamps, looped)
    under ``namespace`` and records the arrival time and frames of each odometry message. A
    :class:`graph_fixtures.ProbeNode` (own context, node spun on a daemon thread) with a second thread that
    publishes in real time.

    Args:
        domain_id: ROS domain of the launch under test.
        flight: a :class:`velobins_data.flight.Flight` (e.g. from the simulator).
        namespace: the launch's namespace (topics are relative there).
        imu_frame: ``header.frame_id`` of the IMU messages (mavros: ``base_link`` on every vehicle).
        imu_topic: where the IMU goes (``mavros/imu/data_raw`` for a launch with the IMU bridge).
    """

    def __init__(
        self, domain_id: int, flight: Any, namespace: str = "", imu_frame: str = "base_link", imu_topic: str = "imu"
    ) -> None:
        from velobins_data.bag import rotor_kind_code

        self.flight, self.imu_frame, self.imu_topic = flight, imu_frame, imu_topic
        self.kind = rotor_kind_code(flight.rotor_kind)
        self.odometry: list[tuple[float, str, str]] = []
        """(monotonic arrival time, header.frame_id, child_frame_id) of each odometry message."""
        super().__init__(domain_id, "vehicle", namespace=namespace, depth=10, diagnostics=False)
        self._publisher = threading.Thread(target=self._publish, name="vehicle-publish", daemon=True)
        self._publisher.start()

    def add_endpoints(self) -> None:
        from nav_msgs.msg import Odometry
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Imu

        from velobins_msgs.msg import RotorSpeeds

        self.imu_pub = self.node.create_publisher(Imu, self.imu_topic, qos_profile_sensor_data)
        self.rotor_pub = self.node.create_publisher(RotorSpeeds, "rotor_speeds", qos_profile_sensor_data)
        self.Imu, self.RotorSpeeds = Imu, RotorSpeeds
        self.node.create_subscription(Odometry, "velobins/odometry", self._on_odometry, self.reliable)

    def _on_odometry(self, msg: Any) -> None:
        self.odometry.append((time.monotonic(), msg.header.frame_id, msg.child_frame_id))

    def _publish(self) -> None:
        f = self.flight
        period = float(f.t[1] - f.t[0])
        imu, rot = self.Imu(), self.RotorSpeeds()
        imu.header.frame_id = self.imu_frame
        rot.kind = self.kind
        # stamped when due, as a driver stamps a sample: a stall delays the burst, never squeezes its stamps
        for n, due in RealTime(1.0 / period).play(math.inf, stop=self._stop):
            k = n % len(f.t)
            for msg in (imu, rot):
                set_stamp(msg, due)
            a, w = imu.linear_acceleration, imu.angular_velocity
            a.x, a.y, a.z = (float(x) for x in f.acc[k])
            w.x, w.y, w.z = (float(x) for x in f.gyro[k])
            rot.speeds = [float(x) for x in f.rotor[k]]
            self.imu_pub.publish(imu)
            self.rotor_pub.publish(rot)

    def wait_for_odometry(self, timeout: float) -> float:
        """Monotonic arrival time of the first odometry message (AssertionError after ``timeout`` s)."""
        self.wait_for(lambda: self.odometry, timeout, "odometry")
        return self.odometry[0][0]

    def close(self) -> None:
        """Stop publishing, then spinning; destroy the node and shut the context down."""
        self._stop.set()
        self._publisher.join(timeout=5.0)
        super().close()
