"""The eval node: records a replayed flight's estimates and ground truth, then writes the report.

Subscribes to the network's velocity estimates, the EKF's per-update fused state and its
odometry, and the ground truth from the bag. When the replay node raises its latched ``finished``
flag (or the node is shut down), it builds the same :class:`~velobins_eval.evaluate.FlightRecord`
the offline evaluation builds and scores it with the same code (:mod:`velobins_eval.report`), so
graph and offline figures agree up to what the graph itself changes (message timing). The report
holds what the graph produced: ``estimates/<flight>/<label>/`` with the TUM trajectories, the
per-update record and the MCAP recording of the odometry (full rate), the updates, the network's
twist, the ground truth and the NEES (:mod:`velobins_eval.recording`), beside ``report.html``.

It also republishes the ground truth as a ``nav_msgs/Path`` for RViz.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as PathMsg
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from scipy.spatial.transform import Rotation
from std_msgs.msg import Bool

from velobins_common.fields import param
from velobins_msgs.msg import Displacement, VelocityEstimate
from velobins_ros import LATCHED_QOS, DropCounter, declare_config, run_node, running, stamp_to_sec

from .report import write_report
from .scoring import FlightRecord, GroundTruth


@dataclass(frozen=True)
class EvalNodeConfig:
    """Parameters of the eval node."""

    output_dir: str = "velobins_report"
    """Directory of the report: metrics.json, metrics.md, report.md, report.html, plots/ and estimates/ (TUM, CSV,
    MCAP of the run)."""
    label: str = "velobins"
    """Method name of this run in the report."""
    flight: str = "flight"
    """Flight name in the report."""
    velocity_topic: str = "velobins/velocity"
    """Network estimates (velobins_msgs/VelocityEstimate)."""
    displacement_topic: str = "velobins/displacement"
    """Network displacements of TLIO/EqNIO/IMO models (velobins_msgs/Displacement): their updates are
    scored on the fused columns only (no network velocity)."""
    update_topic: str = "velobins/ekf/update"
    """EKF state right after each update (nav_msgs/Odometry, twist in odom, with covariance)."""
    odometry_topic: str = "velobins/odometry"
    """Fused odometry (nav_msgs/Odometry)."""
    ground_truth_topic: str = "ground_truth/odometry"
    """Ground truth from the bag (nav_msgs/Odometry, twist in the body frame)."""
    ground_truth_path_topic: str = "ground_truth/path"
    """Ground truth republished as nav_msgs/Path for RViz (empty disables it)."""
    finished_topic: str = "velobins/replay/finished"
    """Latched flag of the replay node; True triggers the report."""
    finish_grace: float = param(1.0, min=0.0, max=600.0)
    """Wall seconds without a new estimate, update or odometry message, once the replay finished, before the
    report is written [s]: the graph may still be working through a backlog (a loaded machine), and the report
    waits for it instead of a fixed time after the finished flag."""
    exit_after_report: bool = True
    """Shut down once the report is written (the replay launch then ends)."""
    plots: bool = True
    """Write the per-flight PNG plots."""
    queue_depth: int = param(1000, min=1, max=100000)
    """Depth of the recording subscriptions (a report must not lose messages to a busy moment)."""


class EvalNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__("velobins_eval")
        self.config = declare_config(self, EvalNodeConfig())
        cfg = self.config
        self.drops = DropCounter(self)
        self.net: list[list[float]] = []
        self.upd: list[list[float]] = []
        self.odom: list[list[float]] = []
        self.gt: list[list[float]] = []
        self.finished_at: float | None = None
        self.last_input = -math.inf  # monotonic time of the last estimate, update or odometry received
        self.report_written = False
        self.table = ""
        qos = QoSProfile(depth=cfg.queue_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(VelocityEstimate, cfg.velocity_topic, self.on_velocity, qos)
        self.create_subscription(Displacement, cfg.displacement_topic, self.on_displacement, qos)
        self.create_subscription(Odometry, cfg.update_topic, self.on_update, qos)
        self.create_subscription(Odometry, cfg.odometry_topic, self.on_odometry, qos)
        self.create_subscription(Odometry, cfg.ground_truth_topic, self.on_ground_truth, qos)
        self.create_subscription(Bool, cfg.finished_topic, self.on_finished, LATCHED_QOS)
        self.gt_path_pub = None
        if cfg.ground_truth_path_topic:
            self.gt_path_pub = self.create_publisher(PathMsg, cfg.ground_truth_path_topic, 10)
            self.gt_path = PathMsg()
            self.create_timer(0.5, self.publish_gt_path)

    # ------------------------------------------------------------------ recording
    def on_velocity(self, msg: VelocityEstimate) -> None:
        self.last_input = time.monotonic()
        var = np.asarray(msg.covariance).reshape(3, 3).diagonal()
        row = [stamp_to_sec(msg.header.stamp), msg.velocity.x, msg.velocity.y, msg.velocity.z, *var]
        if np.all(np.isfinite(row)):
            self.net.append(row)
        else:
            self.drops.drop("velocity_non_finite")

    def on_displacement(self, msg: Displacement) -> None:
        """A displacement method's estimate: its stamp matches the EKF update; no body velocity to score."""
        self.last_input = time.monotonic()
        self.net.append([stamp_to_sec(msg.header.stamp), *([math.nan] * 6)])

    def on_update(self, msg: Odometry) -> None:
        self.last_input = time.monotonic()
        v, p, q = msg.twist.twist.linear, msg.pose.pose.position, msg.pose.pose.orientation
        cov = np.asarray(msg.twist.covariance).reshape(6, 6)[:3, :3].reshape(-1)
        self.upd.append([stamp_to_sec(msg.header.stamp), v.x, v.y, v.z, *cov, p.x, p.y, p.z, q.x, q.y, q.z, q.w])

    def on_odometry(self, msg: Odometry) -> None:
        """Full-rate fused state: position, orientation and the body-frame twist (for the recording)."""
        self.last_input = time.monotonic()
        p, q, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
        self.odom.append([stamp_to_sec(msg.header.stamp), p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z])

    def on_ground_truth(self, msg: Odometry) -> None:
        p, q, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
        self.gt.append([stamp_to_sec(msg.header.stamp), p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z])
        if self.gt_path_pub is not None and len(self.gt) % 10 == 1:
            pose = PoseStamped()
            pose.header = msg.header
            pose.pose = msg.pose.pose
            self.gt_path.poses.append(pose)

    def publish_gt_path(self) -> None:
        if self.gt_path.poses:
            self.gt_path.header = self.gt_path.poses[-1].header
            self.gt_path_pub.publish(self.gt_path)

    def on_finished(self, msg: Bool) -> None:
        if msg.data and self.finished_at is None:
            self.finished_at = time.monotonic()
            self.get_logger().info(
                "replay finished; writing the report once no estimate or odometry came for "
                f"{self.config.finish_grace:g} s"
            )

    # ------------------------------------------------------------------ report
    def due(self) -> bool:
        """The replay finished and the graph has been quiet for finish_grace s (its backlog is through)."""
        if self.finished_at is None:
            return False
        return time.monotonic() - max(self.finished_at, self.last_input) >= self.config.finish_grace

    def build_record(self) -> tuple[FlightRecord, GroundTruth]:
        """The recorded streams as the offline evaluation's record and ground truth."""
        if len(self.gt) < 2 or not self.upd or not self.net or len(self.odom) < 2:
            raise ValueError(
                f"not enough data recorded: ground truth {len(self.gt)}, updates {len(self.upd)}, "
                f"estimates {len(self.net)}, odometry {len(self.odom)}"
            )
        gt = _sorted_unique(np.array(self.gt))
        q = gt[:, 4:8] / np.linalg.norm(gt[:, 4:8], axis=1, keepdims=True)
        truth = GroundTruth(gt[:, 0], gt[:, 1:4], q, Rotation.from_quat(q).apply(gt[:, 8:11]))
        net = _sorted_unique(np.array(self.net))
        upd = _sorted_unique(np.array(self.upd))
        odom = _sorted_unique(np.array(self.odom))
        # updates that have their network estimate, inside the ground-truth span
        common, i_upd, i_net = np.intersect1d(np.round(upd[:, 0], 6), np.round(net[:, 0], 6), return_indices=True)
        keep = (common >= truth.t[0]) & (common <= truth.t[-1])
        i_upd, i_net = i_upd[keep], i_net[keep]
        t = upd[i_upd, 0]
        q_odom = odom[:, 4:8] / np.linalg.norm(odom[:, 4:8], axis=1, keepdims=True)
        q_upd = upd[i_upd, 16:20] / np.linalg.norm(upd[i_upd, 16:20], axis=1, keepdims=True)
        record = FlightRecord(
            flight=self.config.flight,
            method=self.config.label,
            t=t,
            v_net=net[i_net, 1:4],
            var_net=net[i_net, 4:7],
            p_fused=upd[i_upd, 13:16],
            v_fused=upd[i_upd, 1:4],
            cov_fused=upd[i_upd, 4:13].reshape(-1, 3, 3),
            t_traj=odom[:, 0],
            p_traj=odom[:, 1:4],
            q_fused=q_upd,
            q_traj=q_odom,
            v_traj=Rotation.from_quat(q_odom).apply(odom[:, 8:11]),  # twist is in base_link: to the world
        )
        return record, truth

    def write(self) -> None:
        """Score and write the report (once)."""
        if self.report_written:
            return
        self.report_written = True
        try:
            record, truth = self.build_record()
        except ValueError as exc:
            self.get_logger().error(f"no report: {exc}")
            return
        out = Path(self.config.output_dir)
        graph = {
            "estimates": len(self.net),
            "updates": len(self.upd),
            "odometry": len(self.odom),
            "ground_truth": len(self.gt),
            "odometry_rate_hz": float((len(self.odom) - 1) / (self.odom[-1][0] - self.odom[0][0])),
            "dropped": dict(self.drops.counts),
        }
        self.table = write_report(
            {record.method: {record.flight: record}},
            {record.flight: truth},
            out,
            {"source": "ros graph (velobins_eval_node)", "graph": graph},
            plots=self.config.plots,
        )
        self.get_logger().info(f"report written to {out}:\n{self.table}")


def _sorted_unique(rows: np.ndarray) -> np.ndarray:
    """Rows sorted by stamp (column 0), keeping the last message of each stamp (replays can repeat)."""
    order = np.argsort(rows[:, 0], kind="stable")
    rows = rows[order]
    last = np.append(np.diff(rows[:, 0]) != 0, True)
    return rows[last]


def _spin(node: EvalNode) -> None:
    """Spin until the report is written (when exit_after_report), writing it once it is due."""
    while running() and not (node.due() and node.config.exit_after_report and node.report_written):
        rclpy.spin_once(node, timeout_sec=0.1)
        if node.due():
            node.write()


def main(args: list[str] | None = None) -> None:
    # on_stop: also on Ctrl-C, whatever was recorded is scored.
    run_node(EvalNode, "velobins_eval", args, spin=_spin, on_stop=lambda node: node.write())


if __name__ == "__main__":
    main()
