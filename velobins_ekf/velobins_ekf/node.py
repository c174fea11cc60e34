"""The EKF node: ``imu`` + ``velobins/velocity`` or ``/displacement`` -> odometry, path, TF, per-update states, health.

A thin adapter around :class:`velobins_ekf.runner.VelocityEkf` (which validates, counts and
re-orders its inputs). It fuses body velocities (``velocity_topic``; VeloBins, AI-IO, AirIO) and
displacements over a window (``displacement_topic``; TLIO, EqNIO, IMO) against a clone of the pose at
the window start, made by re-propagation (:meth:`~velobins_ekf.runner.VelocityEkf.add_displacement`):
``filter.history_length`` must cover window + latency (1.5 s for 1 s windows; the node warns once when
shorter, later ones are dropped as ``filter_disp_too_old``). Topic names are relative; frame ids get
``frame_prefix`` (tf_prefix style, several vehicles on one TF tree). Outputs:

* ``velobins/odometry`` (``nav_msgs/Odometry``, at ``odom_rate`` of IMU time): pose of
  ``base_link`` in ``odom`` with its covariance, twist in ``base_link`` (linear: fused body
  velocity; angular: bias-corrected rate);
* ``velobins/path`` (``nav_msgs/Path``, bounded length) and TF ``odom -> base_link`` on ``/tf``
  (``tf2_ros`` when installed, else ``tf2_msgs/TFMessage`` on ``/tf`` directly);
* ``velobins/ekf/update`` (``nav_msgs/Odometry`` with ``child_frame_id`` = ``odom``, i.e. the twist
  is in the world frame): the state right after each velocity or displacement update, at the
  measurement stamp (a displacement's window end): fused position and orientation, fused world
  velocity and its covariance (what the evaluation scores per update: ATE/RTE samples, NEES);
* ``/diagnostics`` every ``diagnostics_period``: input rates, drops by reason (the node's and the
  filter's), initialised, resets, age of the last odometry, and the NIS of the last ``nis_window``
  updates against its χ²₃ bounds, with a level and a message naming the cause
  (:func:`velobins_common.health.ekf_status`); a throttled WARN when no odometry goes out for
  ``silence_warn_after`` s while IMU arrives.

Initialisation: ``init_mode: align`` (on a vehicle: gravity alignment from the first IMU samples,
velocity from the first network velocity), ``align_at_rest`` (gravity alignment over the first
``filter.init_window`` s of IMU, zero velocity: a vehicle starting at rest with a network that reads
the filter's attitude from its odometry — TLIO, EqNIO, IMO, AirIO — so cannot give the first
measurement 'align' waits for) or ``ground_truth`` (evaluation: the state of the first
``ground_truth_topic`` message, as the paper starts the filter). IMU stamps jumping back by more
than ``time_jump_reset`` (bag loop) restart the filter the same way. Parameters marked live
(output rates, path, TF, the filter's noise model and gate) can be changed with ``ros2 param set``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped, TransformStamped
from nav_msgs.msg import Odometry, Path
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu

from velobins_common.fields import param
from velobins_common.health import CountDelta, NisMonitor, RateMeter, SilenceAlarm, Status, Stream, ekf_status
from velobins_msgs.msg import Displacement, VelocityEstimate
from velobins_ros import (
    RELIABLE_QOS,
    DropCounter,
    declare_config,
    run_node,
    sec_to_stamp,
    sensor_qos,
    set_xyz,
    stamp_to_sec,
)
from velobins_ros.health import Diagnostics, count_values, stream_values
from velobins_ros.imu_frame import DEFAULT_IMU_FRAME_TIMEOUT, ImuFrame

from .config import DISPLACEMENT_HISTORY_MARGIN, EkfConfig
from .ekf import NavState
from .initial_state import state_from_alignment
from .runner import VelocityEkf
from .so3 import matrix_to_quat

INIT_MODES = ("align", "align_at_rest", "ground_truth")
"""How the filter starts (parameter ``init_mode``)."""
FILTER_COUNTS_NOT_DROPS = ("imu_used", "meas_applied", "meas_late", "disp_applied", "disp_late")
"""FilterStats counters of inputs used (a late one too): the others count inputs the filter refused."""


@dataclass(frozen=True)
class EkfNodeConfig:
    """Parameters of the EKF node besides the filter's own (``filter.*``, :class:`EkfConfig`).

    Topic names are relative, so a namespace (``-r __ns:=/drone1``) moves them all; TF stays on
    ``/tf``, told apart by ``frame_prefix``."""

    imu_topic: str = param("imu")
    """Input sensor_msgs/Imu."""
    velocity_topic: str = param("velobins/velocity")
    """Input velobins_msgs/VelocityEstimate from the network node (velocity methods)."""
    displacement_topic: str = param("velobins/displacement")
    """Input velobins_msgs/Displacement from the network node (displacement methods: TLIO, EqNIO, IMO); needs
    filter.history_length >= window + latency (1.5 s for 1 s windows)."""
    odometry_topic: str = param("velobins/odometry")
    """Output nav_msgs/Odometry."""
    path_topic: str = param("velobins/path")
    """Output nav_msgs/Path (empty disables it)."""
    update_topic: str = param("velobins/ekf/update")
    """Output per-update state (nav_msgs/Odometry, twist in odom) for evaluation (empty disables it)."""
    ground_truth_topic: str = param("ground_truth/odometry")
    """nav_msgs/Odometry that initialises the filter when init_mode is ground_truth."""
    init_mode: str = param("align", choices=INIT_MODES)
    """'align' (gravity alignment + first network velocity), 'align_at_rest' (gravity alignment + zero
    velocity once filter.init_window s of IMU arrived: a vehicle starting at rest with a network that reads the
    filter's attitude, TLIO/EqNIO/IMO/AirIO) or 'ground_truth' (first ground-truth pose)."""
    odom_frame: str = param("odom")
    """World frame of the pose (REP-105 odom; frame_prefix is prepended)."""
    base_frame: str = param("base_link")
    """Body frame (FLU; frame_prefix is prepended)."""
    frame_prefix: str = param("")
    """Prepended to every frame id the node publishes or looks up (tf_prefix style, e.g. 'drone1/'),
    so several vehicles share one TF tree."""
    imu_to_body: tuple[float, ...] = param(())
    """Rotation of the IMU frame into the body frame (FLU), overriding TF: 4 numbers = quaternion
    (x, y, z, w), 9 = row-major rotation matrix (v_body = R v_imu); e.g. [1.0, 0.0, 0.0, 0.0] for an
    FRD IMU. Empty: the IMU's header.frame_id is used (empty or the body frame = identity), with the
    static transform body <- frame_id from /tf_static."""
    imu_frame_timeout: float = param(DEFAULT_IMU_FRAME_TIMEOUT, min=0.1, max=3600.0)
    """Seconds (wall time) without a static transform for the IMU's frame before a repeated ERROR
    (the messages are counted as dropped, imu_frame_unknown, from the first)."""
    publish_tf: bool = param(True, live=True)
    """Broadcast odom -> base_link."""
    odom_rate: float = param(50.0, min=0.0, max=10000.0, live=True)
    """Odometry/TF rate [Hz of IMU time]; 0 publishes after every IMU sample. Default 50 Hz: at a 1 kHz
    IMU, publishing after every sample makes the filter propagate one interval at a time and build an
    odometry and a TF message per sample, several times the callbacks' work at 50 Hz, on top of rclpy's
    own cost of taking in the IMU; a busy companion computer then falls behind and drops IMU samples,
    while at 200 Hz and below the node keeps up (benchmarks/bench_ekf_node.py). 50 Hz is smooth for
    RViz, TF users and position control fed by odometry; the estimate is the same at any rate, and
    evaluation sets 0 to record every sample."""
    path_period: float = param(0.1, min=0.0, max=3600.0, live=True)
    """IMU-time spacing of the poses appended to the path [s]."""
    path_max_length: int = param(3000, min=1, max=1000000, live=True)
    """Poses kept in the path (oldest dropped first)."""
    path_publish_period: float = param(1.0, min=0.0, max=3600.0, live=True)
    """IMU-time spacing of path messages [s]: the whole path is re-sent each time, so not per pose."""
    output_queue_depth: int = param(10, min=1, max=100000)
    """History depth of the reliable outputs (DESIGN: 10); evaluation raises it so a busy recorder loses nothing."""
    time_jump_reset: float = param(0.5, min=0.0, max=3600.0, live=True)
    """IMU stamps going back by more than this [s] restart the filter (bag loop, clock reset)."""
    input_queue_depth: int = param(200, min=1, max=100000)
    """Queue depth of the IMU subscription (deep enough for fast replay)."""
    diagnostics_period: float = param(1.0, min=0.05, max=60.0)
    """Seconds (wall) between the node's diagnostic_msgs/DiagnosticArray messages on /diagnostics."""
    input_timeout: float = param(0.5, min=0.01, max=60.0, live=True)
    """Wall seconds without a message after which an input stream counts as stopped (diagnostics)."""
    silence_warn_after: float = param(2.0, min=0.1, max=3600.0, live=True)
    """Wall seconds without odometry while IMU arrives before a (throttled) WARN naming the cause."""
    nis_window: int = param(100, min=1, max=100000)
    """Velocity updates whose NIS (normalised innovation squared) the diagnostics summarise."""
    nis_min_share: float = param(0.5, min=0.0, max=1.0, live=True)
    """A full NIS window with less than this share inside the χ²₃ 95 % interval is a WARN
    (a consistent filter has 95 %); 0 disables the check."""


class EkfNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__("velobins_ekf")
        self.config = declare_config(self, EkfNodeConfig(), on_change=self._on_config)
        self.filter_config = declare_config(self, EkfConfig(), prefix="filter.", on_change=self._on_filter)
        cfg = self.config
        self.drops = DropCounter(self)
        self.imu_frame = ImuFrame(
            self, self.base_frame, cfg.imu_to_body, self.drops, cfg.imu_frame_timeout, frame_prefix=cfg.frame_prefix
        )
        self.filter = self._new_filter()
        # Warm the filter's lazy imports (scipy's rotations) now: on the first odometry they stalled
        # the callback long enough to overflow the IMU queue during a fast replay.
        matrix_to_quat(np.eye(3))
        self._last_imu_t: float | None = None
        self._last_odom_t = -math.inf
        self._last_path_t = -math.inf
        self._last_path_pub_t = -math.inf
        self._last_update_t = -math.inf
        self._last_gyro = np.zeros(3)
        self._dt = 0.01
        self.resets = 0

        out_qos = QoSProfile(depth=cfg.output_queue_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.odom_pub = self.create_publisher(Odometry, cfg.odometry_topic, out_qos)
        self.path_pub = self.create_publisher(Path, cfg.path_topic, RELIABLE_QOS) if cfg.path_topic else None
        self.update_pub = None
        if cfg.update_topic:
            self.update_pub = self.create_publisher(Odometry, cfg.update_topic, out_qos)
        self.path = Path()
        self.path.header.frame_id = self.odom_frame
        self._tf = self._make_tf_broadcaster() if cfg.publish_tf else None
        self.imu_sub = self.create_subscription(Imu, cfg.imu_topic, self.on_imu, sensor_qos(cfg.input_queue_depth))
        self.velocity_sub = self.create_subscription(
            VelocityEstimate, cfg.velocity_topic, self.on_velocity, RELIABLE_QOS
        )
        self.displacement_sub = self.create_subscription(
            Displacement, cfg.displacement_topic, self.on_displacement, RELIABLE_QOS
        )
        self._history_checked = False
        self._rest_acc: list[tuple[float, np.ndarray]] = []  # align_at_rest: body specific force since the start
        self.gt_sub = None
        if cfg.init_mode == "ground_truth":
            self.gt_sub = self.create_subscription(Odometry, cfg.ground_truth_topic, self.on_ground_truth, RELIABLE_QOS)
        self.create_timer(5.0, self.drops.maybe_log)
        self._init_health()
        self.get_logger().info(f"EKF ready: init_mode={cfg.init_mode}, publishing {self.odom_pub.topic_name}")

    @property
    def odom_frame(self) -> str:
        """World frame id as published (frame_prefix + odom_frame)."""
        return self.config.frame_prefix + self.config.odom_frame

    @property
    def base_frame(self) -> str:
        """Body frame id as published (frame_prefix + base_frame)."""
        return self.config.frame_prefix + self.config.base_frame

    def _on_config(self, config: EkfNodeConfig) -> None:
        self.config = config
        if config.publish_tf and self._tf is None:
            self._tf = self._make_tf_broadcaster()  # kept when switched off again (publishing is gated)
        if len(self.path.poses) > config.path_max_length:
            del self.path.poses[: len(self.path.poses) - config.path_max_length]

    def _on_filter(self, config: EkfConfig) -> None:
        self.filter_config = config
        self.filter.set_config(config)

    def _new_filter(self) -> VelocityEkf:
        # update records are kept whether published or not: the diagnostics' NIS comes from them
        return VelocityEkf(self.filter_config, keep_updates=True)

    # ------------------------------------------------------------------ health
    def _init_health(self) -> None:
        cfg = self.config
        self.imu_meter, self.velocity_meter, self.displacement_meter = RateMeter(), RateMeter(), RateMeter()
        self.nis = NisMonitor(cfg.nis_window)
        self._last_out: float | None = None
        self._new_drops = CountDelta()
        self._alarm = SilenceAlarm(cfg.silence_warn_after)
        self.diagnostics = Diagnostics(self, "EKF", self.base_frame, cfg.diagnostics_period, self.health)

    def _measurements(self, now: float) -> Stream:
        """The network's measurement stream: displacements once they came last, else velocities."""
        vel, disp = self.velocity_meter, self.displacement_meter
        if disp.last is not None and (vel.last is None or disp.last > vel.last):
            return Stream("displacement estimates", self.displacement_sub.topic_name, disp.age(now))
        return Stream("velocity estimates", self.velocity_sub.topic_name, vel.age(now))

    def _decide(self, now: float, drops: dict[str, int]) -> Status:
        cfg = self.config
        imu = Stream("IMU", self.imu_sub.topic_name, self.imu_meter.age(now))
        measurements = self._measurements(now)
        if cfg.init_mode == "ground_truth":
            waiting = f"the first ground-truth pose on {self.gt_sub.topic_name}"
        elif cfg.init_mode == "align_at_rest":
            waiting = f"{self.filter_config.init_window:g} s of IMU (gravity alignment at rest)"
        else:
            waiting = f"IMU and the first velocity estimate on {self.velocity_sub.topic_name} (or align_at_rest)"
        return ekf_status(
            imu, measurements, cfg.input_timeout, self.filter.initialized, waiting, self.nis, cfg.nis_min_share, drops
        )

    def health(self, now: float) -> Status:
        """The node's state for /diagnostics (decided by :func:`velobins_common.health.ekf_status`)."""
        drops = self._new_drops.since(self._all_drops())
        status = self._decide(now, drops)
        vel, disp = self.velocity_meter, self.displacement_meter
        values = stream_values(now, {"IMU": self.imu_meter, "velocity estimates": vel, "displacement estimates": disp})
        values["initialised"] = str(self.filter.initialized).lower()
        values["resets"] = str(self.resets)
        stats = self.filter.stats
        values["updates fused"] = str(stats.meas_applied + stats.disp_applied)
        values["displacement updates fused"] = str(stats.disp_applied)
        values["last odometry age [s]"] = "never" if self._last_out is None else f"{now - self._last_out:.3f}"
        values.update(self.nis.values())
        values.update(count_values("dropped", self._all_drops()))
        return Status(status.level, status.message, values)

    def _all_drops(self) -> dict[str, int]:
        """The node's drops by reason and the filter's own rejections (its non-zero stats counters)."""
        stats = {k: v for k, v in vars(self.filter.stats).items() if k not in FILTER_COUNTS_NOT_DROPS}
        return {**self.drops.counts, **{f"filter_{k}": v for k, v in stats.items() if v}}

    def _check_silence(self) -> None:
        """Throttled WARN naming the cause when no odometry went out for silence_warn_after s."""
        now = time.monotonic()
        silence = SilenceAlarm.silence(now, self._last_out, self.imu_meter.first)
        if self._alarm.due(now, silence, 0.0, self.config.input_timeout):
            cause = self._decide(now, {}).message
            self.get_logger().warning(f"no odometry for {silence:.1f} s while IMU arrives: {cause}")

    def _make_tf_broadcaster(self) -> Callable[[TransformStamped], None]:
        """tf2_ros's broadcaster (a declared dependency); where it is missing (the ROS PyPI wheels
        ship none), a plain ``tf2_msgs/TFMessage`` publisher on ``/tf``, said once in the log."""
        try:
            from tf2_ros import TransformBroadcaster
        except ImportError as exc:
            try:
                from tf2_msgs.msg import TFMessage
            except ImportError:
                raise RuntimeError(
                    f"publish_tf needs tf2_ros (an exec_depend of velobins_ekf) or tf2_msgs: {exc}; "
                    "install ros-$ROS_DISTRO-tf2-ros or set publish_tf: false"
                ) from exc
            self.get_logger().info(f"tf2_ros not importable ({exc}): publishing tf2_msgs/TFMessage on /tf directly")
            pub = self.create_publisher(TFMessage, "/tf", QoSProfile(depth=100, durability=DurabilityPolicy.VOLATILE))
            return lambda transform: pub.publish(TFMessage(transforms=[transform]))
        return TransformBroadcaster(self).sendTransform

    # ------------------------------------------------------------------ inputs
    def on_ground_truth(self, msg: Odometry) -> None:
        if self.filter.initialized:
            return
        p, q, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
        quat = np.array([q.x, q.y, q.z, q.w])
        values = np.array([p.x, p.y, p.z, v.x, v.y, v.z, *quat])
        if not np.all(np.isfinite(values)) or abs(np.linalg.norm(quat) - 1.0) > 1e-3:
            self.drops.drop("ground_truth_invalid", "non-finite or non-unit ground-truth pose")
            return
        state = NavState.from_pose(quat / np.linalg.norm(quat), np.zeros(3), [p.x, p.y, p.z])
        state.vel = state.rot @ np.array([v.x, v.y, v.z])  # twist is in the child (body) frame
        t = stamp_to_sec(msg.header.stamp)
        self.filter.initialize(t, state)
        self._last_imu_t = None
        self.get_logger().info(f"initialised from ground truth at t={t:.3f}")

    def on_imu(self, msg: Imu) -> None:
        t = stamp_to_sec(msg.header.stamp)
        self.imu_meter.tick(time.monotonic(), t)
        if self._last_imu_t is not None and t < self._last_imu_t - self.config.time_jump_reset:
            self.get_logger().warning(f"IMU time jumped back {self._last_imu_t - t:.3f} s: restarting the filter")
            self.reset()
            self.drops.counts["time_jump_reset"] += 1
        if self.config.init_mode == "ground_truth" and not self.filter.initialized:
            self.drops.drop("imu_before_init", "waiting for the first ground-truth pose")
            self._check_silence()
            return
        body = self.imu_frame.to_body(msg)
        if body is None:  # IMU frame not known yet: counted as imu_frame_unknown
            self._check_silence()
            return
        acc, gyro = body
        if self.config.init_mode == "align_at_rest" and not self.filter.initialized:
            self._align_at_rest(t, acc)
        before = self.filter.stats.imu_used
        if not self.filter.add_imu(t, acc, gyro):
            self.drops.drop("imu_rejected", f"filter stats {self._stats_summary()}")
            return
        if self._last_imu_t is not None and t > self._last_imu_t:
            self._dt = t - self._last_imu_t
        self._last_imu_t = t
        self._last_gyro = gyro
        if self.filter.stats.imu_used > before and self.filter.initialized:
            self._publish_updates()
            self._publish_state(msg.header.stamp, t)
        else:
            self._check_silence()

    def _align_at_rest(self, t: float, acc: np.ndarray) -> None:
        """init_mode align_at_rest: start at ``t`` (before this sample is fed) once ``filter.init_window`` s of
        IMU arrived: roll, pitch from their mean specific force, yaw ``filter.init_yaw``, zero velocity."""
        if not np.all(np.isfinite(acc)):
            return
        buf, cfg = self._rest_acc, self.filter_config
        buf.append((t, np.asarray(acc, dtype=np.float64)))
        if t - buf[0][0] < cfg.init_window:
            return
        acc_window = np.array([a for _, a in buf])
        buf.clear()
        try:
            state = state_from_alignment(acc_window, np.zeros(3), cfg.init_yaw, gravity=cfg.gravity)
        except ValueError as exc:  # free fall / garbage: start the window again
            self.drops.drop("align_failed", str(exc))
            return
        self.filter.initialize(t, state)
        self.get_logger().info(f"initialised at rest (gravity alignment over {cfg.init_window:g} s) at t={t:.3f}")

    def on_displacement(self, msg: Displacement) -> None:
        t_end, t_start = stamp_to_sec(msg.header.stamp), stamp_to_sec(msg.start)
        self.displacement_meter.tick(time.monotonic(), t_end)
        if not self.filter.initialized:
            self.drops.drop("displacement_before_init", "the filter is not initialised yet")
            return
        need = (t_end - t_start) + DISPLACEMENT_HISTORY_MARGIN
        if not self._history_checked and math.isfinite(need) and self.filter_config.history_length < need:
            self.get_logger().warning(
                f"filter.history_length {self.filter_config.history_length:g} s < displacement window "
                f"{t_end - t_start:.3f} s + {DISPLACEMENT_HISTORY_MARGIN:g} s latency: later displacements are "
                f"dropped (filter_disp_too_old); set filter.history_length >= {math.ceil(need * 10) / 10:g}"
            )
        self._history_checked = True
        z = np.array([msg.displacement.x, msg.displacement.y, msg.displacement.z])
        cov = np.asarray(msg.covariance, dtype=np.float64).reshape(3, 3)
        if not self.filter.add_displacement(t_start, t_end, z, cov):
            self.drops.drop("displacement_rejected", f"filter stats {self._stats_summary()}")
            return
        self._publish_updates()

    def on_velocity(self, msg: VelocityEstimate) -> None:
        t = stamp_to_sec(msg.header.stamp)
        self.velocity_meter.tick(time.monotonic(), t)
        z = np.array([msg.velocity.x, msg.velocity.y, msg.velocity.z])
        cov = np.asarray(msg.covariance, dtype=np.float64).reshape(3, 3)
        if not self.filter.add_velocity(t, z, cov):
            self.drops.drop("velocity_rejected", f"filter stats {self._stats_summary()}")
            return
        self._publish_updates()

    def reset(self) -> None:
        """Restart the filter (initialises again per init_mode) and clear the path."""
        self.filter = self._new_filter()
        self._last_imu_t = None
        self._last_odom_t = self._last_path_t = self._last_path_pub_t = self._last_update_t = -math.inf
        self.path.poses = []
        self._rest_acc = []
        self.resets += 1

    def _stats_summary(self) -> str:
        s = self.filter.stats
        return ", ".join(f"{k}={v}" for k, v in vars(s).items() if v and k not in FILTER_COUNTS_NOT_DROPS)

    # ------------------------------------------------------------------ outputs
    def _publish_updates(self) -> None:
        records = self.filter.pop_updates()
        if self.filter.displacement_updates:  # drained like pop_updates (re-fused ones come again, same stamps)
            records += self.filter.displacement_updates
            self.filter.displacement_updates = []
            records.sort(key=lambda r: r.stamp)
        for r in records:
            if r.vel_world is None or not r.stamp > self._last_update_t or not np.all(np.isfinite(r.vel_world)):
                continue
            self._last_update_t = r.stamp
            self.nis.add(r.nis)
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

    def _publish_state(self, stamp, t: float) -> None:
        period = 1.0 / self.config.odom_rate if self.config.odom_rate > 0 else 0.0
        if t - self._last_odom_t < period - 1e-9:
            return
        filt = self.filter
        pos, quat, vb = filt.position, filt.quaternion, filt.velocity_body
        pose_cov, twist_cov = filt.pose_covariance_ros(), filt.twist_covariance(self._dt)
        if not all(np.all(np.isfinite(x)) for x in (pos, quat, vb, pose_cov, twist_cov)):
            self.get_logger().error("filter state became non-finite: restarting it (nothing published)")
            self.drops.counts["non_finite_state"] += 1
            self.reset()
            return
        # on a grid of the period (jittery stamps would otherwise stretch it); restarted after a gap
        self._last_odom_t = self._last_odom_t + period if t - self._last_odom_t < 2.0 * period else t
        cfg = self.config
        odom = Odometry()
        odom.header.stamp = stamp
        odom.header.frame_id = self.odom_frame
        odom.child_frame_id = self.base_frame
        pp, pq = odom.pose.pose.position, odom.pose.pose.orientation
        set_xyz(pp, pos)
        pq.x, pq.y, pq.z, pq.w = (float(x) for x in quat)
        odom.pose.covariance = pose_cov.reshape(-1).tolist()
        set_xyz(odom.twist.twist.linear, vb)
        set_xyz(odom.twist.twist.angular, filt.angular_rate(self._last_gyro))
        odom.twist.covariance = twist_cov.reshape(-1).tolist()
        self.odom_pub.publish(odom)
        self._last_out = time.monotonic()
        if self._tf is not None and cfg.publish_tf:
            tf = TransformStamped()
            tf.header = odom.header
            tf.child_frame_id = self.base_frame
            set_xyz(tf.transform.translation, pos)
            tf.transform.rotation = pq
            self._tf(tf)
        if self.path_pub is not None and t - self._last_path_t >= cfg.path_period - 1e-9:
            self._last_path_t = t
            pose = PoseStamped()
            pose.header = odom.header
            pose.pose = odom.pose.pose
            self.path.poses.append(pose)
            if len(self.path.poses) > cfg.path_max_length:
                del self.path.poses[: len(self.path.poses) - cfg.path_max_length]
            if t - self._last_path_pub_t >= cfg.path_publish_period - 1e-9:
                self._last_path_pub_t = t
                self.path.header.stamp = stamp
                self.path_pub.publish(self.path)


def main(args: list[str] | None = None) -> None:
    run_node(EkfNode, "velobins_ekf", args)


if __name__ == "__main__":
    main()
