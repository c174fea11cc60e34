"""The network node: ``imu`` + ``rotor_speeds`` -> ``velobins/velocity`` (+ ``twist``) or ``velobins/displacement``.

A thin adapter around :class:`velobins_net.inference.StreamingPredictor`: it validates each message
at the boundary (non-finite values, wrong rotor count or kind, stamps that go backwards), counts
and logs what it drops, keeps the time-aligned 1 s window, and publishes at the update rate
(paper: 20 Hz) the network's estimate with its covariance. Any shipped method runs
(``ModelConfig.method``, paper Table I), and what it publishes follows what the method measures:

* velocity methods (VeloBins, AI-IO, AirIO): the body-frame velocity as ``velobins_msgs/VelocityEstimate``
  on ``velocity_topic`` (and ``geometry_msgs/TwistWithCovarianceStamped`` on ``twist_topic``);
* displacement methods (TLIO, EqNIO, IMO): the displacement over the window in the gravity-aligned
  yaw frame of its start as ``velobins_msgs/Displacement`` on ``displacement_topic`` (stamp = window
  end, ``start`` = window start, full covariance), which the EKF fuses against a clone of its pose.

Methods whose input carries the attitude (TLIO, EqNIO, IMO, AirIO: ``ModelConfig.attitude_input``)
take it from the filter: the node subscribes to the EKF's odometry on ``attitude_topic`` (the EKF's
``odometry_topic``) and hands each pose's orientation to the predictor; without a fresh one it counts
``no_attitude`` and publishes nothing. This is a loop: the EKF must run before the network does, so
it needs an initialisation without a network output (EKF ``init_mode: ground_truth`` or
``align_at_rest``).

A backwards jump of the IMU stamps larger than ``time_jump_reset`` (a bag restarting in a loop, a
clock reset) clears the window instead of stalling on "out of order" forever.

Topic names are relative (a namespace moves them); frame ids get ``frame_prefix``. Health goes to
``/diagnostics`` every ``diagnostics_period``: input rates, the rotor stream's lag, drops by reason,
the predictor's outcomes (``no_rotor``, ``rotor_stale``, ...) and the age of the last estimate, with
a level and a message naming the cause (:func:`velobins_common.health.net_status`); when no
estimate goes out for ``silence_warn_after`` s while IMU arrives, a throttled WARN says why.
Parameters marked live in the config dataclasses (update rate, rotor age, uncertainty, ...) can be
changed with ``ros2 param set``; the others are read-only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from geometry_msgs.msg import TwistWithCovarianceStamped
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu

from velobins_common.constants import ROTOR_COMMAND, RPM_TO_RAD_PER_S
from velobins_common.fields import param
from velobins_common.frames import is_unit_quaternion
from velobins_common.health import CountDelta, RateMeter, Status, Stream, net_status
from velobins_msgs.msg import Displacement, RotorSpeeds, VelocityEstimate
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
from velobins_ros.health import NodeHealth, count_values
from velobins_ros.imu_frame import DEFAULT_IMU_FRAME_TIMEOUT, ImuFrame

from .inference import PredictorConfig, StreamingPredictor, bin_decoder, check_model_uncertainty, load_checkpoint
from .pretrained import resolve_checkpoint

UNUSED_VARIANCE = 1.0e6
"""Variance put on the angular block of /velobins/twist: the network estimates no angular rate."""


@dataclass(frozen=True)
class NetNodeConfig:
    """Parameters of the network node besides the predictor's own (``predictor.*``, :class:`PredictorConfig`).

    Declared from these defaults; see config/velobins.yaml. Topic names are relative, so a
    namespace (``-r __ns:=/drone1``) moves them all."""

    model_path: str = param("")
    """Checkpoint written by `velobins train` (best.pt)."""
    imu_topic: str = param("imu")
    """Input sensor_msgs/Imu (body-frame specific force and angular rate)."""
    rotor_topic: str = param("rotor_speeds")
    """Input velobins_msgs/RotorSpeeds."""
    velocity_topic: str = param("velobins/velocity")
    """Output velobins_msgs/VelocityEstimate."""
    twist_topic: str = param("velobins/twist")
    """Output geometry_msgs/TwistWithCovarianceStamped (for robot_localization); empty disables it.
    Velocity methods only."""
    displacement_topic: str = param("velobins/displacement")
    """Output velobins_msgs/Displacement of displacement methods (TLIO, EqNIO, IMO) instead of the velocity:
    the displacement over the window in the gravity-aligned yaw frame of the window start."""
    attitude_topic: str = param("velobins/odometry")
    """Input nav_msgs/Odometry of the EKF (its odometry_topic) whose orientation (base_link in odom) is the
    attitude input of the methods that take one (TLIO, EqNIO, IMO, AirIO); unused by the others."""
    odom_frame: str = param("odom")
    """World frame of the filter whose attitude the network takes (frame_prefix is prepended): the frame_id of
    a Displacement, whose vector is in this frame's gravity-aligned yaw frame at the window start."""
    frame_id: str = param("base_link")
    """Body frame of the published velocity (frame_prefix is prepended)."""
    frame_prefix: str = param("")
    """Prepended to every frame id the node publishes (tf_prefix style, e.g. 'drone1/'), so several
    vehicles share one TF tree."""
    imu_to_body: tuple[float, ...] = param(())
    """Rotation of the IMU frame into the body frame (FLU), overriding TF: 4 numbers = quaternion
    (x, y, z, w), 9 = row-major rotation matrix (v_body = R v_imu); e.g. [1.0, 0.0, 0.0, 0.0] for an
    FRD IMU. Empty: the IMU's header.frame_id is used (empty or the body frame = identity), with the
    static transform body <- frame_id from /tf_static."""
    imu_frame_timeout: float = param(DEFAULT_IMU_FRAME_TIMEOUT, min=0.1, max=3600.0)
    """Seconds (wall time) without a static transform for the IMU's frame before a repeated ERROR
    (the messages are counted as dropped, imu_frame_unknown, from the first)."""
    time_jump_reset: float = param(0.5, min=0.0, max=3600.0, live=True)
    """IMU stamps going back by more than this [s] reset the window (bag loop, clock reset)."""
    publish_distribution: bool = param(False, live=True)
    """Also publish the bin centres and per-axis bin distribution (debugging, plots)."""
    input_queue_depth: int = param(200, min=1, max=100000)
    """Queue depth of the sensor-data subscriptions (deep enough for fast replay)."""
    num_threads: int = param(1, min=1, max=256)
    """torch intra-op threads for inference (1 keeps latency predictable beside the EKF)."""
    diagnostics_period: float = param(1.0, min=0.05, max=60.0)
    """Seconds (wall) between the node's diagnostic_msgs/DiagnosticArray messages on /diagnostics."""
    input_timeout: float = param(0.5, min=0.01, max=60.0, live=True)
    """Wall seconds without a message after which an input stream counts as stopped (diagnostics)."""
    silence_warn_after: float = param(2.0, min=0.1, max=3600.0, live=True)
    """Wall seconds without an estimate while IMU arrives before a (throttled) WARN naming the cause."""
    startup_grace: float = param(30.0, min=0.0, max=3600.0)
    """Seconds after the start during which, until the node is first OK, its health changes are logged at
    INFO and the silence warning waits: a healthy start (inputs arriving, a model loading) prints no WARN;
    a node not OK by then says so at WARN. /diagnostics shows the true level from the start. 0: no grace."""


class VeloBinsNetNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__("velobins_net")
        self.config = declare_config(self, NetNodeConfig(), on_change=self._on_config)
        self.predictor_config = declare_config(
            self, PredictorConfig(), prefix="predictor.", on_change=self._on_predictor
        )
        cfg = self.config
        if not cfg.model_path:
            raise ValueError("parameter 'model_path' is required: a checkpoint from `velobins train`")
        torch.set_num_threads(max(1, cfg.num_threads))
        self.model = load_checkpoint(resolve_checkpoint(cfg.model_path))  # a path, or a shipped name (crazyflie)
        self.rotor_kind = self.model.cfg.rotor_kind
        self.num_rotors = self.model.cfg.num_rotors
        self.drops = DropCounter(self)
        self.imu_frame = ImuFrame(
            self,
            cfg.frame_prefix + cfg.frame_id,
            cfg.imu_to_body,
            self.drops,
            cfg.imu_frame_timeout,
            frame_prefix=cfg.frame_prefix,
        )
        self.predictor = self._new_predictor()
        self.add_on_set_parameters_callback(self._check_uncertainty)
        self._last_imu_t: float | None = None
        self.published = 0
        bins = bin_decoder(self.model)
        self._bin_centers = bins.centres.detach().cpu().numpy().astype(np.float64).tolist() if bins is not None else []
        self.kind = self.model.cfg.output_kind
        self.vel_pub = self.twist_pub = self.disp_pub = None
        if self.kind == "displacement":
            self.disp_pub = self.create_publisher(Displacement, cfg.displacement_topic, RELIABLE_QOS)
            out_topic = self.disp_pub.topic_name
        else:
            self.vel_pub = self.create_publisher(VelocityEstimate, cfg.velocity_topic, RELIABLE_QOS)
            out_topic = self.vel_pub.topic_name
            if cfg.twist_topic:
                self.twist_pub = self.create_publisher(TwistWithCovarianceStamped, cfg.twist_topic, RELIABLE_QOS)
        qos = sensor_qos(cfg.input_queue_depth)
        self.imu_sub = self.create_subscription(Imu, cfg.imu_topic, self.on_imu, qos)
        self.rotor_sub = self.create_subscription(RotorSpeeds, cfg.rotor_topic, self.on_rotor, qos)
        self.attitude_sub = None
        if self.model.cfg.attitude_input:
            self.attitude_sub = self.create_subscription(
                Odometry, cfg.attitude_topic, self.on_attitude, QoSProfile(depth=cfg.input_queue_depth)
            )
        self.create_timer(5.0, self.drops.maybe_log)
        self._init_health()
        attitude = f"; attitude from {self.attitude_sub.topic_name}" if self.attitude_sub is not None else ""
        self.get_logger().info(
            f"model {cfg.model_path}: method={self.model.cfg.method} ({self.kind}) head={self.model.cfg.head} "
            f"rotors={self.num_rotors} ({self.rotor_kind}) window={self.model.cfg.window_s:g}s@"
            f"{self.model.cfg.rate_hz:g}Hz; publishing {self.kind} on {out_topic} at "
            f"{self.predictor_config.update_rate:g} Hz{attitude}"
        )

    def _new_predictor(self) -> StreamingPredictor:
        return StreamingPredictor(self.model, self.predictor_config, return_probs=self.config.publish_distribution)

    # ------------------------------------------------------------------ live parameters
    def _on_config(self, config: NetNodeConfig) -> None:
        self.config = config
        self.predictor.return_probs = config.publish_distribution and bin_decoder(self.model) is not None
        self.health.set_silence_after(config.silence_warn_after)

    def _on_predictor(self, config: PredictorConfig) -> None:
        self.predictor_config = config
        self.predictor.set_config(config)

    def _check_uncertainty(self, params: list) -> SetParametersResult:
        """Refuse an uncertainty source the loaded model cannot give (before it is accepted)."""
        for p in params:
            if p.name == "predictor.uncertainty" and isinstance(p.value, str):
                try:
                    source = p.value or self.model.cfg.uncertainty
                    check_model_uncertainty(self.model, source)
                except ValueError as exc:
                    return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ health
    def _init_health(self) -> None:
        self.imu_meter, self.rotor_meter, self.attitude_meter = RateMeter(), RateMeter(), RateMeter()
        self._reasons = CountDelta()
        meters = {"IMU": self.imu_meter, "rotor speeds": self.rotor_meter}
        if self.attitude_sub is not None:
            meters["filter attitude"] = self.attitude_meter
        cfg = self.config
        self.health = NodeHealth(
            self,
            "velocity network",
            cfg.frame_prefix + cfg.frame_id,
            cfg.diagnostics_period,
            lambda now, drops: self._decide(now, self._reasons.since(self.predictor.counts), drops),
            meters,
            cfg.silence_warn_after,
            f"{self.kind} estimate",
            cfg.startup_grace,
        )
        self.health.drop_counts = lambda: self.drops.counts
        self.health.extra_values = self._values

    def _rotor_lag(self) -> float | None:
        imu, rotor = self.imu_meter.last_stamp, self.rotor_meter.last_stamp
        return None if imu is None or rotor is None else imu - rotor

    def _decide(self, now: float, reasons: Mapping[str, int], drops: Mapping[str, int]) -> Status:
        cfg = self.config
        imu = Stream("IMU", self.imu_sub.topic_name, self.imu_meter.age(now))
        rotor = Stream("rotor speeds", self.rotor_sub.topic_name, self.rotor_meter.age(now))
        silence = self.health.silence(now)
        lag, max_age = self._rotor_lag(), self.predictor.max_rotor_age
        status = net_status(
            imu, rotor, cfg.input_timeout, lag, max_age, silence, cfg.silence_warn_after, reasons, drops
        )
        if self.attitude_sub is not None and status.message.endswith("no_attitude"):
            age = self.attitude_meter.age(now)
            seen = "none yet" if age is None else f"last {age:.1f} s ago"
            hint = (
                f" (the {self.model.cfg.method} network takes the filter's attitude from "
                f"{self.attitude_sub.topic_name}: {seen}; the EKF publishes odometry only once initialised: "
                "its init_mode ground_truth or align_at_rest)"
            )
            status = Status(status.level, status.message + hint, status.values)
        return status

    def _values(self, now: float) -> dict[str, str]:
        """The network's own key-values on /diagnostics (besides the input rates and drops)."""
        lag = self._rotor_lag()
        values = {"rotor lag behind IMU [s]": "n/a" if lag is None else f"{lag:.3f}"}
        values["estimates published"] = str(self.published)
        values.update(count_values("predictor", self.predictor.counts))
        return values

    def _check_silence(self) -> None:
        """Throttled WARN naming the cause when no estimate went out for silence_warn_after s."""
        self.health.check_silence(
            self.config.input_timeout, lambda now: self._decide(now, self.predictor.counts, {}).message
        )

    # ------------------------------------------------------------------ inputs
    def on_rotor(self, msg: RotorSpeeds) -> None:
        t = stamp_to_sec(msg.header.stamp)
        self.rotor_meter.tick(time.monotonic(), t)
        speeds = np.asarray(msg.speeds, dtype=np.float64)
        if speeds.shape != (self.num_rotors,):
            self.drops.drop("rotor_count", f"{speeds.size} rotors, model expects {self.num_rotors}")
            return
        if self.rotor_kind == ROTOR_COMMAND:
            if msg.kind != RotorSpeeds.KIND_NORMALIZED:
                self.drops.drop("rotor_kind", f"kind {msg.kind}, model was trained on normalised commands")
                return
        elif msg.kind == RotorSpeeds.KIND_RPM:
            speeds = speeds * RPM_TO_RAD_PER_S
        elif msg.kind != RotorSpeeds.KIND_RAD_PER_SEC:
            self.drops.drop("rotor_kind", f"kind {msg.kind}, model was trained on rotor speeds")
            return
        if not self.predictor.push_rotor(t, speeds):
            self.drops.drop("rotor_rejected", "non-finite or non-increasing stamp")

    def on_attitude(self, msg: Odometry) -> None:
        """The filter's body->world orientation (pose of base_link in odom) for attitude-input methods."""
        t = stamp_to_sec(msg.header.stamp)
        self.attitude_meter.tick(time.monotonic(), t)
        q = msg.pose.pose.orientation
        quat = np.array([q.x, q.y, q.z, q.w])
        if not is_unit_quaternion(quat):
            self.drops.drop("attitude_invalid", "non-finite or non-unit orientation in the filter's odometry")
            return
        self.predictor.push_attitude(t, quat)  # a stamp not after the newest (a repeat) is ignored

    def on_imu(self, msg: Imu) -> None:
        t = stamp_to_sec(msg.header.stamp)
        self.imu_meter.tick(time.monotonic(), t)
        if self._last_imu_t is not None and t < self._last_imu_t - self.config.time_jump_reset:
            self.get_logger().warning(
                f"IMU time jumped back {self._last_imu_t - t:.3f} s (bag loop / clock reset): resetting the window"
            )
            self.drops.counts["time_jump_reset"] += 1
            self.predictor = self._new_predictor()
        body = self.imu_frame.to_body(msg)
        if body is None:  # IMU frame not known yet: counted as imu_frame_unknown
            self._check_silence()
            return
        if not self.predictor.push_imu(t, *body):
            self.drops.drop("imu_rejected", "non-finite value or non-increasing stamp")
            return
        self._last_imu_t = t
        prediction = self.predictor.step()
        if prediction is None:
            self._check_silence()
            return
        if not (np.all(np.isfinite(prediction.measurement)) and np.all(np.isfinite(prediction.covariance_matrix()))):
            self.drops.drop("non_finite_output", "network produced NaN/inf; not published")
            self._check_silence()
            return
        self.publish(msg.header.stamp, prediction)

    # ------------------------------------------------------------------ outputs
    def publish(self, stamp, prediction) -> None:
        if prediction.kind == "displacement":
            self.publish_displacement(stamp, prediction)
            return
        v, cov = prediction.velocity, prediction.covariance_matrix()
        out = VelocityEstimate()
        out.header.stamp = stamp
        out.header.frame_id = self.config.frame_prefix + self.config.frame_id
        set_xyz(out.velocity, v)
        out.covariance = cov.reshape(-1).tolist()
        if prediction.probs is not None:
            out.bin_centers = self._bin_centers
            out.distribution = prediction.probs.astype(np.float32).reshape(-1).tolist()
        self.vel_pub.publish(out)
        if self.twist_pub is not None:
            twist = TwistWithCovarianceStamped()
            twist.header = out.header
            twist.twist.twist.linear = out.velocity
            cov6 = np.zeros((6, 6))
            cov6[:3, :3] = cov
            cov6[3:, 3:] = np.eye(3) * UNUSED_VARIANCE
            twist.twist.covariance = cov6.reshape(-1).tolist()
            self.twist_pub.publish(twist)
        self.published += 1
        self.health.mark_output()

    def publish_displacement(self, stamp, prediction) -> None:
        """``Displacement`` over [t_start, stamp] in the yaw frame of t_start (``prediction.displacement``)."""
        out = Displacement()
        out.header.stamp = stamp
        out.header.frame_id = self.config.frame_prefix + self.config.odom_frame
        sec_to_stamp(prediction.t_start, out.start)
        set_xyz(out.displacement, prediction.displacement)
        cov = prediction.covariance_matrix()
        out.covariance = (0.5 * (cov + cov.T)).reshape(-1).tolist()
        self.disp_pub.publish(out)
        self.published += 1
        self.health.mark_output()


def main(args: list[str] | None = None) -> None:
    run_node(VeloBinsNetNode, "velobins_net", args)


if __name__ == "__main__":
    main()
