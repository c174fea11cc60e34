"""What the EKF node publishes: odometry, TF, the path and the per-update states.

:class:`Outputs` owns the node's publishers and turns the filter's public state
(:class:`~velobins_ekf.runner.VelocityEkf`) into messages; the node decides when. Frames: the pose
of ``base_link`` in ``odom`` with its covariance (rotation about the ``odom`` axes), the twist in
``base_link``; the per-update states carry their twist in ``odom``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from geometry_msgs.msg import PoseStamped, TransformStamped
from nav_msgs.msg import Odometry, Path
from rclpy.node import Node
from rclpy.publisher import Publisher

from velobins_ros import sec_to_stamp, set_xyz

from .runner import VelocityEkf
from .so3 import matrix_to_quat


class Outputs:
    """The EKF node's outputs and their message building (see module docstring).

    Args:
        node: the EKF node (its ``config`` is read at each call: output parameters are live).
        odom_frame, base_frame: frame ids as published (frame_prefix included).
        odom_pub, path_pub, update_pub: the node's publishers (the node creates them: its module is the
            one place the graph's topics are read from); None where a topic is disabled.
        make_tf: makes the TF broadcaster (called when ``publish_tf`` is or becomes true).
    """

    def __init__(
        self,
        node: Node,
        odom_frame: str,
        base_frame: str,
        odom_pub: Publisher,
        path_pub: Publisher | None,
        update_pub: Publisher | None,
        make_tf: Callable[[], Callable[[TransformStamped], None]],
    ) -> None:
        self.node, self.odom_frame, self.base_frame = node, odom_frame, base_frame
        self.odom_pub, self.path_pub, self.update_pub = odom_pub, path_pub, update_pub
        self.path = Path()
        self.path.header.frame_id = odom_frame
        self._make_tf = make_tf
        self._tf = make_tf() if node.config.publish_tf else None
        self.restart()

    def restart(self) -> None:
        """Forget the timing of the outputs and the path (the filter restarted)."""
        self.last_odom_t = self.last_path_t = self.last_path_pub_t = self.last_update_t = -math.inf
        self.path.poses = []

    def configure(self) -> None:
        """Apply live changes of the node's output parameters."""
        cfg = self.node.config
        if cfg.publish_tf and self._tf is None:
            self._tf = self._make_tf()  # kept when switched off again (publishing is gated)
        if len(self.path.poses) > cfg.path_max_length:
            del self.path.poses[: len(self.path.poses) - cfg.path_max_length]

    def odometry_due(self, t: float) -> bool:
        """Whether odometry at IMU stamp ``t`` is due at ``odom_rate`` (0: every sample)."""
        rate = self.node.config.odom_rate
        return rate <= 0 or t - self.last_odom_t >= 1.0 / rate - 1e-9

    def publish_updates(self, records: list) -> list[float]:
        """Publish the per-update states (velocity and displacement records, by stamp) not published yet;
        returns the NIS of those (the records a late measurement re-created come again: skipped)."""
        nis = []
        for r in sorted(records, key=lambda r: r.stamp):
            if r.vel_world is None or not r.stamp > self.last_update_t or not np.all(np.isfinite(r.vel_world)):
                continue
            self.last_update_t = r.stamp
            nis.append(r.nis)
            if self.update_pub is None:
                continue
            out = Odometry()
            sec_to_stamp(r.stamp, out.header.stamp)
            out.header.frame_id = out.child_frame_id = self.odom_frame  # twist in the world frame
            set_xyz(out.pose.pose.position, r.pos)
            q = out.pose.pose.orientation
            q.x, q.y, q.z, q.w = (float(x) for x in matrix_to_quat(r.rot))
            set_xyz(out.twist.twist.linear, r.vel_world)
            cov = np.zeros((6, 6))
            cov[:3, :3] = r.vel_world_cov
            out.twist.covariance = cov.reshape(-1).tolist()
            self.update_pub.publish(out)
        return nis

    def publish_state(self, filt: VelocityEkf, stamp, t: float, gyro: np.ndarray, imu_dt: float) -> bool:
        """Odometry, TF and the path at IMU stamp ``t`` (``stamp`` as a message stamp); False (nothing
        published) when the state is not finite."""
        cfg = self.node.config
        pos, quat, vb = filt.position, filt.quaternion, filt.velocity_body
        pose_cov, twist_cov = filt.pose_covariance_ros(), filt.twist_covariance(imu_dt)
        if not all(np.all(np.isfinite(x)) for x in (pos, quat, vb, pose_cov, twist_cov)):
            return False
        period = 1.0 / cfg.odom_rate if cfg.odom_rate > 0 else 0.0
        # on a grid of the period (jittery stamps would otherwise stretch it); restarted after a gap
        self.last_odom_t = self.last_odom_t + period if t - self.last_odom_t < 2.0 * period else t
        odom = Odometry()
        odom.header.stamp = stamp
        odom.header.frame_id = self.odom_frame
        odom.child_frame_id = self.base_frame
        pp, pq = odom.pose.pose.position, odom.pose.pose.orientation
        set_xyz(pp, pos)
        pq.x, pq.y, pq.z, pq.w = (float(x) for x in quat)
        odom.pose.covariance = pose_cov.reshape(-1).tolist()
        set_xyz(odom.twist.twist.linear, vb)
        set_xyz(odom.twist.twist.angular, filt.angular_rate(gyro))
        odom.twist.covariance = twist_cov.reshape(-1).tolist()
        self.odom_pub.publish(odom)
        if self._tf is not None and cfg.publish_tf:
            tf = TransformStamped()
            tf.header = odom.header
            tf.child_frame_id = self.base_frame
            set_xyz(tf.transform.translation, pos)
            tf.transform.rotation = pq
            self._tf(tf)
        if self.path_pub is not None and t - self.last_path_t >= cfg.path_period - 1e-9:
            self.last_path_t = t
            pose = PoseStamped()
            pose.header = odom.header
            pose.pose = odom.pose.pose
            self.path.poses.append(pose)
            if len(self.path.poses) > cfg.path_max_length:
                del self.path.poses[: len(self.path.poses) - cfg.path_max_length]
            if t - self.last_path_pub_t >= cfg.path_publish_period - 1e-9:
                self.last_path_pub_t = t
                self.path.header.stamp = stamp
                self.path_pub.publish(self.path)
        return True
