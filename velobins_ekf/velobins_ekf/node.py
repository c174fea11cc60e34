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
* ``/diagnostics`` every ``diagnostics_period``: input rates, IMU samples lost (holes in the stamps),
  the latency IMU stamp -> odometry publish, drops by reason (the node's and the filter's), restarts,
  holds and pose sets, the position and velocity σ, the time since the last fused update and a
  windowed χ² test of the NIS, with a level and a message naming the cause
  (:func:`velobins_common.health.ekf_status`; docs/ros_interface.md has the table); a throttled WARN
  when no odometry goes out for ``silence_warn_after`` s while IMU arrives.

Services: ``reset`` (``std_srvs/Trigger``: the filter restarts and initialises again per
``init_mode``) and the ``set_pose`` topic (``geometry_msgs/PoseWithCovarianceStamped``, as
robot_localization names it: position, attitude and their covariance; velocity and biases kept).
robot_localization's ``SetPose`` service type is not installable here, so set_pose is the topic only.

Initialisation: ``init_mode: align`` (on a vehicle: gravity alignment from the first IMU samples,
velocity from the first network velocity), ``align_at_rest`` (gravity alignment over the first
``filter.init_window`` s of IMU, zero velocity: a vehicle starting at rest with a network that reads
the filter's attitude from its odometry — TLIO, EqNIO, IMO, AirIO — so cannot give the first
measurement 'align' waits for) or ``ground_truth`` (evaluation: the state of the first
``ground_truth_topic`` message, as the paper starts the filter). IMU stamps jumping back by more
than ``time_jump_reset`` (bag loop) restart the filter the same way. Parameters marked live
(output rates, path, TF, the filter's noise model and gate) can be changed with ``ros2 param set``.

Real time: the IMU subscription is raw and the node reads the seven numbers and the frame id it needs
from the bytes (:mod:`velobins_ekf.imu_wire`: building the message object cost more than the rest); IMU
callbacks only feed the filter, which queues the intervals and integrates them as a
block when the odometry (``odom_rate``) reads the state (:mod:`velobins_ekf.batch`); the node spins
on rclpy's ``EventsExecutor`` (``executor: events``), which takes a message at a fraction of the
wait-set executor's cost. A full IMU queue (``input_queue_depth``) drops the oldest samples (DDS
KEEP_LAST): the holes in the stamps count them (``IMU samples lost``) and the diagnostics show the loss.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import rclpy
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseWithCovarianceStamped, TransformStamped
from nav_msgs.msg import Odometry, Path
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu
from std_srvs.srv import Trigger

from velobins_common.fields import param
from velobins_msgs.msg import Displacement, VelocityEstimate
from velobins_ros import RELIABLE_QOS, DropCounter, declare_config, run_node, running, sensor_qos, stamp_to_sec
from velobins_ros.imu_frame import DEFAULT_IMU_FRAME_TIMEOUT, ImuFrame

from .config import DISPLACEMENT_HISTORY_MARGIN, EkfConfig
from .ekf import NavState
from .events import EVENT_COUNTERS, USED_COUNTERS
from .imu_wire import ImuView, WireError
from .node_health import EkfHealth
from .outputs import Outputs
from .runner import VelocityEkf
from .so3 import matrix_to_quat, quat_to_matrix

INIT_MODES = ("align", "align_at_rest", "ground_truth")
"""How the filter starts (parameter ``init_mode``)."""
EXECUTORS = ("events", "single_threaded")
"""How the node spins (parameter ``executor``)."""


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
    set_pose_topic: str = param("set_pose")
    """Input geometry_msgs/PoseWithCovarianceStamped (robot_localization's set_pose): sets position, attitude
    and their covariance at the message's stamp (frame odom_frame; all-zero covariance = the initial sigmas;
    a zero stamp = now); empty disables it."""
    reset_service: str = param("reset")
    """std_srvs/Trigger service that restarts the filter (it initialises again per init_mode); empty disables it."""
    output_queue_depth: int = param(10, min=1, max=100000)
    """History depth of the reliable outputs (DESIGN: 10); evaluation raises it so a busy recorder loses nothing."""
    time_jump_reset: float = param(0.5, min=0.0, max=3600.0, live=True)
    """IMU stamps going back by more than this [s] restart the filter (bag loop, clock reset)."""
    input_queue_depth: int = param(1000, min=1, max=100000)
    """Queue depth of the IMU subscription: 1 s at 1 kHz, so a stall or a fast replay loses nothing; when it is
    full the oldest samples go first (counted as IMU samples lost). The velocity and displacement subscriptions
    (reliable) get the same depth: a node busy with an IMU backlog takes them late, not never."""
    executor: str = param("events", choices=EXECUTORS)
    """'events' (rclpy's EventsExecutor: a message taken at a fraction of the cost) or 'single_threaded'
    (rclpy's wait-set executor, the setting before; benchmarks/bench_ekf_node.py compares them)."""
    diagnostics_period: float = param(1.0, min=0.05, max=60.0)
    """Seconds (wall) between the node's diagnostic_msgs/DiagnosticArray messages on /diagnostics."""
    input_timeout: float = param(0.5, min=0.01, max=60.0, live=True)
    """Wall seconds without a message after which an input stream counts as stopped (diagnostics: WARN)."""
    imu_error_after: float = param(2.0, min=0.01, max=3600.0, live=True)
    """Wall seconds without IMU after which the diagnostics say ERROR (no propagation, no odometry)."""
    update_warn_after: float = param(0.5, min=0.01, max=3600.0, live=True)
    """Seconds of IMU time without a fused velocity or displacement update before a WARN (dead reckoning)."""
    update_error_after: float = param(2.0, min=0.01, max=3600.0, live=True)
    """Seconds of IMU time without a fused update before an ERROR (IMU-only drift grows with t²)."""
    pos_sigma_warn: float = param(5.0, min=0.0, max=1e6, live=True)
    """Position standard deviation [m] (largest axis) above which the diagnostics WARN. Nominal flights with
    the shipped model stay below 0.3 m over 20 s; position is unobservable, so σ grows slowly with time."""
    pos_sigma_error: float = param(20.0, min=0.0, max=1e6, live=True)
    """Position standard deviation [m] above which they say ERROR (10 s of dead reckoning reach 25–40 m)."""
    vel_sigma_warn: float = param(0.5, min=0.0, max=1e6, live=True)
    """Velocity standard deviation [m/s] (largest axis) above which the diagnostics WARN (nominal: < 0.2)."""
    vel_sigma_error: float = param(2.0, min=0.0, max=1e6, live=True)
    """Velocity standard deviation [m/s] above which they say ERROR."""
    imu_loss_warn: float = param(0.05, min=0.0, max=1.0, live=True)
    """Share of IMU samples missing from the stamps (last 2 s) above which the diagnostics WARN."""
    latency_warn: float = param(0.1, min=0.0, max=60.0, live=True)
    """95th percentile [s] of IMU stamp -> odometry publish above which the diagnostics WARN."""
    event_report_time: float = param(5.0, min=0.0, max=3600.0, live=True)
    """Wall seconds a hold over an IMU gap, a restart or a set pose stays in the diagnostics (WARN)."""
    silence_warn_after: float = param(2.0, min=0.1, max=3600.0, live=True)
    """Wall seconds without odometry while IMU arrives before a (throttled) WARN naming the cause."""
    startup_grace: float = param(30.0, min=0.0, max=3600.0)
    """Seconds after the start during which, until the node is first OK, its health changes and its input drops
    (a first velocity older than the filter's start; still counted) are logged at INFO and the silence warning
    waits: a healthy start (inputs arriving, a model loading) prints no WARN;
    a node not OK by then says so at WARN. /diagnostics shows the true level from the start. 0: no grace."""
    nis_window: int = param(60, min=1, max=100000)
    """Updates whose NIS (normalised innovation squared) the consistency test sums: 3 s at 20 Hz. The shipped
    model's largest 60-update mean NIS on the demo flights is 2.5 against an alarm at 4.07; an FRD IMU or an
    IMU in g raise it at the first full window (benchmarks/bench_nis_check.py)."""
    nis_alarm_probability: float = param(1e-3, min=1e-12, max=0.5)
    """The test raises (ERROR) when the window's NIS sum exceeds its χ²(3·nis_window) quantile of 1 − this
    probability, and clears once the sum is back below the median (hysteresis)."""


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
        # update records are kept whether published or not: the diagnostics' NIS comes from them
        self.filter = VelocityEkf(self.filter_config, keep_updates=True)
        # Warm the filter's lazy imports (scipy's rotations) now: on the first odometry they stalled
        # the callback long enough to overflow the IMU queue during a fast replay.
        matrix_to_quat(np.eye(3))
        self._last_imu_t: float | None = None
        self._last_gyro = np.zeros(3)
        self._dt = 0.01
        self._history_checked = False
        out_qos = QoSProfile(depth=cfg.output_queue_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.out = Outputs(
            self,
            self.odom_frame,
            self.base_frame,
            self.create_publisher(Odometry, cfg.odometry_topic, out_qos),
            self.create_publisher(Path, cfg.path_topic, RELIABLE_QOS) if cfg.path_topic else None,
            self.create_publisher(Odometry, cfg.update_topic, out_qos) if cfg.update_topic else None,
            self._make_tf_broadcaster,
        )
        self._imu_view = ImuView()  # the IMU is read from its bytes (imu_wire): the message object costs more
        self.imu_sub = self.create_subscription(
            Imu, cfg.imu_topic, self.on_imu_raw, sensor_qos(cfg.input_queue_depth), raw=True
        )
        # the measurements as deep as the IMU: the executor takes events in arrival order, so a node busy with
        # an IMU backlog would let a depth-10 history overwrite unread measurements, uncounted (seen in the
        # displacement graph test under load: 18 of 118 lost)
        measurement_qos = QoSProfile(depth=cfg.input_queue_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.velocity_sub = self.create_subscription(
            VelocityEstimate, cfg.velocity_topic, self.on_velocity, measurement_qos
        )
        self.displacement_sub = self.create_subscription(
            Displacement, cfg.displacement_topic, self.on_displacement, measurement_qos
        )
        self.gt_sub = None
        if cfg.init_mode == "ground_truth":
            self.gt_sub = self.create_subscription(Odometry, cfg.ground_truth_topic, self.on_ground_truth, RELIABLE_QOS)
        if cfg.set_pose_topic:
            self.create_subscription(PoseWithCovarianceStamped, cfg.set_pose_topic, self.on_set_pose, RELIABLE_QOS)
        if cfg.reset_service:
            self.create_service(Trigger, cfg.reset_service, self.on_reset)
        self.create_timer(5.0, self.drops.maybe_log)
        self.health = EkfHealth(self)
        # drops during the start-up grace (a first velocity older than the filter's start) are expected: INFO
        self.drops.quiet = lambda: self.health.base.diagnostics.starting(time.monotonic())
        self.drops.extra = self.health.all_drops  # the stop summary names the filter's refusals too (filter_*)
        noise = self.filter_config  # the effective densities: what a params_file overlay set is visible in the log
        self.get_logger().info(
            f"EKF ready: init_mode={cfg.init_mode}, filter.acc_noise_density={noise.acc_noise_density:g}, "
            f"filter.gyro_noise_density={noise.gyro_noise_density:g}, publishing {self.out.odom_pub.topic_name}"
        )

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
        self.out.configure()
        self.health.base.set_silence_after(config.silence_warn_after)

    def _on_filter(self, config: EkfConfig) -> None:
        self.filter_config = config
        self.filter.set_config(config)

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

    # ------------------------------------------------------------------ services
    def on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """``reset``: restart the filter; it initialises again per init_mode."""
        self.restart("reset service")
        response.success = True
        response.message = (
            f"filter restarted: it initialises again ({self.config.init_mode}: {self.health.waiting_for()})"
        )
        return response

    def on_set_pose(self, msg: PoseWithCovarianceStamped) -> None:
        """``set_pose``: position, attitude and their covariance (robot_localization's convention)."""
        frame = msg.header.frame_id.lstrip("/")
        if frame and frame != self.odom_frame:
            self.drops.drop("set_pose_frame", f"set_pose in {frame!r}: expected {self.odom_frame!r} (or empty)")
            return
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        pos, quat = np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w])
        cov = np.asarray(msg.pose.covariance, dtype=np.float64).reshape(6, 6)
        if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(quat))) or abs(np.linalg.norm(quat) - 1.0) > 1e-3:
            self.drops.drop("set_pose_invalid", "non-finite position or non-unit orientation")
            return
        stamp = msg.header.stamp
        t = None if stamp.sec == 0 and stamp.nanosec == 0 else stamp_to_sec(stamp)  # unstamped: now
        try:
            at_stamp = self.filter.set_pose(pos, quat_to_matrix(quat), cov, t=t)
        except ValueError as exc:
            self.drops.drop("set_pose_invalid", str(exc))
            return
        self.health.nis.reset()
        where = "" if at_stamp else f" at the filter's time, not its stamp {t:.3f} (outside the filter's history)"
        self.health.report(
            f"pose set by {self.get_namespace().rstrip('/')}/{self.config.set_pose_topic}: {pos.round(3)}{where}"
        )

    def restart(self, why: str) -> None:
        """Restart the filter (initialises again per init_mode) and clear the path; counted by ``why``."""
        self.filter.restart()
        self._last_imu_t = None
        self.out.restart()
        self.health.restarted(why)

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

    def on_imu_raw(self, raw: bytes) -> None:
        """The IMU subscription's callback: the serialized message, read in place (:mod:`velobins_ekf.imu_wire`)."""
        try:
            self._imu_view.parse(raw)
        except WireError as exc:
            self.drops.drop("imu_malformed", str(exc))
            return
        self.on_imu(self._imu_view)

    def on_imu(self, msg: Imu | ImuView) -> None:
        t = stamp_to_sec(msg.header.stamp)
        now = time.monotonic()
        health = self.health
        prev_wall = health.imu_meter.last
        health.imu_meter.tick(now, t)
        last = self._last_imu_t
        if last is not None and t < last - self.config.time_jump_reset:
            self.restart(f"IMU time jumped back {last - t:.3f} s")
            self.drops.counts["time_jump_reset"] += 1
            last = None
        health.imu_stamp(last, t)
        filt = self.filter
        if self.config.init_mode == "ground_truth" and not filt.initialized:
            self.drops.drop("imu_before_init", "waiting for the first ground-truth pose")
            health.check_silence()
            return
        body = self.imu_frame.to_body(msg)
        if body is None:  # IMU frame not known yet: counted as imu_frame_unknown
            health.check_silence()
            return
        acc, gyro = body
        was_initialised = filt.initialized
        if not filt.add_imu(t, acc, gyro):
            self.drops.drop("imu_rejected", f"filter stats {self._stats_summary()}")
            return
        if self.config.init_mode == "align_at_rest" and not filt.initialized and filt.align_at_rest():
            self.get_logger().info(f"initialised at rest (gravity alignment over {self.filter_config.init_window:g} s)")
        if filt.stats.imu_gaps and (holds := filt.pop_holds()):
            health.hold(holds[-1], now - prev_wall if prev_wall is not None else math.nan)
        if last is not None and t > last:
            self._dt = t - last
        self._last_imu_t = t
        self._last_gyro = gyro
        if not filt.initialized:
            health.check_silence()
            return
        if not was_initialised or filt.updates or filt.displacement_updates:
            self._publish_updates()
        if self.out.odometry_due(t):
            self._publish_state(msg.header.stamp, t)

    def on_displacement(self, msg: Displacement) -> None:
        t_end, t_start = stamp_to_sec(msg.header.stamp), stamp_to_sec(msg.start)
        self.health.displacement_meter.tick(time.monotonic(), t_end)
        if not self.filter.initialized:
            self.drops.drop("displacement_before_init", "the filter is not initialised yet")
            return
        if self.filter_config.velocity_error_sigma > 0:
            self.drops.drop(
                "displacement_velocity_error",
                "filter.velocity_error_sigma > 0 models velocity measurements; set it 0 for a displacement method",
            )
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
        self.health.velocity_meter.tick(time.monotonic(), t)
        z = np.array([msg.velocity.x, msg.velocity.y, msg.velocity.z])
        cov = np.asarray(msg.covariance, dtype=np.float64).reshape(3, 3)
        if not self.filter.add_velocity(t, z, cov):
            self.drops.drop("velocity_rejected", f"filter stats {self._stats_summary()}")
            return
        self._publish_updates()

    def _stats_summary(self) -> str:
        s = self.filter.stats
        skip = USED_COUNTERS + EVENT_COUNTERS
        return ", ".join(f"{k}={v}" for k, v in vars(s).items() if v and k not in skip)

    # ------------------------------------------------------------------ outputs
    def _publish_updates(self) -> None:
        records = self.filter.pop_updates() + self.filter.pop_displacement_updates()
        for nis in self.out.publish_updates(records):
            self.health.nis.add(nis)

    def _publish_state(self, stamp, t: float) -> None:
        if not isinstance(stamp, Time):  # an ImuView's stamp
            stamp = Time(sec=stamp.sec, nanosec=stamp.nanosec)
        if not self.out.publish_state(self.filter, stamp, t, self._last_gyro, self._dt):
            self.get_logger().error("filter state became non-finite: restarting it (nothing published)")
            self.drops.counts["non_finite_state"] += 1
            self.restart("non-finite state")
            return
        self.health.odometry_published(stamp.sec * 1_000_000_000 + stamp.nanosec)


def spin_events(node: Node) -> None:
    """Spin ``node`` on rclpy's EventsExecutor (``executor: events``) until it is asked to stop."""
    from rclpy.experimental import EventsExecutor

    executor = EventsExecutor(context=node.context)
    executor.add_node(node)
    try:
        while running():
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()


def _spin(node: EkfNode) -> None:
    if node.config.executor == "events":
        try:
            spin_events(node)
            return
        except ImportError as exc:  # an rclpy without rclpy.experimental (before Jazzy)
            node.get_logger().warning(f"executor 'events' unavailable ({exc}): spinning single-threaded")
    while running():
        rclpy.spin_once(node, timeout_sec=0.1)


def main(args: list[str] | None = None) -> None:
    run_node(EkfNode, "velobins_ekf", args, spin=_spin)


if __name__ == "__main__":
    main()
