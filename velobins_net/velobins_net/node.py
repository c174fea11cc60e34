"""The network node: ``/imu`` + ``/rotor_speeds`` -> ``/velobins/velocity`` (+ ``/velobins/twist``).

A thin adapter around :class:`velobins_net.inference.StreamingPredictor`: it validates each message
at the boundary (non-finite values, wrong rotor count or kind, stamps that go backwards), counts
and logs what it drops, keeps the time-aligned 1 s window, and publishes at the update rate
(paper: 20 Hz) the body-frame velocity with the covariance decoded from the same bin distribution.

A backwards jump of the IMU stamps larger than ``time_jump_reset`` (a bag restarting in a loop, a
clock reset) clears the window instead of stalling on "out of order" forever.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from geometry_msgs.msg import TwistWithCovarianceStamped
from rclpy.node import Node
from sensor_msgs.msg import Imu

from velobins_msgs.msg import RotorSpeeds, VelocityEstimate
from velobins_ros import (
    RELIABLE_QOS,
    DropCounter,
    declare_config,
    reject_runtime_changes,
    run_node,
    sensor_qos,
    set_xyz,
    stamp_to_sec,
)

from .inference import PredictorConfig, StreamingPredictor, load_checkpoint

UNUSED_VARIANCE = 1.0e6
"""Variance put on the angular block of /velobins/twist: the network estimates no angular rate."""

_RPM_TO_RAD_S = 2.0 * math.pi / 60.0


@dataclass(frozen=True)
class NetNodeConfig:
    """Parameters of the network node besides the predictor's own (``predictor.*``, :class:`PredictorConfig`).

    Declared from these defaults; see config/velobins.yaml."""

    model_path: str = ""
    """Checkpoint written by `velobins train` (best.pt)."""
    imu_topic: str = "/imu"
    """Input sensor_msgs/Imu (body-frame specific force and angular rate)."""
    rotor_topic: str = "/rotor_speeds"
    """Input velobins_msgs/RotorSpeeds."""
    velocity_topic: str = "/velobins/velocity"
    """Output velobins_msgs/VelocityEstimate."""
    twist_topic: str = "/velobins/twist"
    """Output geometry_msgs/TwistWithCovarianceStamped (for robot_localization); empty disables it."""
    frame_id: str = "base_link"
    """Body frame of the published velocity."""
    time_jump_reset: float = 0.5
    """IMU stamps going back by more than this [s] reset the window (bag loop, clock reset)."""
    publish_distribution: bool = False
    """Also publish the bin centres and per-axis bin distribution (debugging, plots)."""
    input_queue_depth: int = 200
    """Queue depth of the sensor-data subscriptions (deep enough for fast replay)."""
    num_threads: int = 1
    """torch intra-op threads for inference (1 keeps latency predictable beside the EKF)."""


class VeloBinsNetNode(Node):
    """See module docstring."""

    def __init__(self) -> None:
        super().__init__("velobins_net")
        self.config = declare_config(self, NetNodeConfig())
        self.predictor_config = declare_config(self, PredictorConfig(), prefix="predictor.")
        reject_runtime_changes(
            self,
            set(NetNodeConfig.__dataclass_fields__) | {"predictor." + f for f in PredictorConfig.__dataclass_fields__},
        )
        cfg = self.config
        if not cfg.model_path:
            raise ValueError("parameter 'model_path' is required: a checkpoint from `velobins train`")
        torch.set_num_threads(max(1, cfg.num_threads))
        self.model = load_checkpoint(cfg.model_path)
        self.rotor_kind = self.model.cfg.rotor_kind
        self.num_rotors = self.model.cfg.num_rotors
        self.drops = DropCounter(self)
        self.predictor = self._new_predictor()
        self._last_imu_t: float | None = None
        self.published = 0
        bins = self.model.bins
        self._bin_centers = bins.centres.detach().cpu().numpy().astype(np.float64).tolist() if bins is not None else []
        self.vel_pub = self.create_publisher(VelocityEstimate, cfg.velocity_topic, RELIABLE_QOS)
        self.twist_pub = (
            self.create_publisher(TwistWithCovarianceStamped, cfg.twist_topic, RELIABLE_QOS)
            if cfg.twist_topic
            else None
        )
        qos = sensor_qos(cfg.input_queue_depth)
        self.create_subscription(Imu, cfg.imu_topic, self.on_imu, qos)
        self.create_subscription(RotorSpeeds, cfg.rotor_topic, self.on_rotor, qos)
        self.create_timer(5.0, self.drops.maybe_log)
        self.get_logger().info(
            f"model {cfg.model_path}: head={self.model.cfg.head} rotors={self.num_rotors} ({self.rotor_kind}) "
            f"window={self.model.cfg.window_s:g}s@{self.model.cfg.rate_hz:g}Hz; publishing {cfg.velocity_topic} "
            f"at {self.predictor_config.update_rate:g} Hz"
        )

    def _new_predictor(self) -> StreamingPredictor:
        return StreamingPredictor(self.model, self.predictor_config, return_probs=self.config.publish_distribution)

    # ------------------------------------------------------------------ inputs
    def on_rotor(self, msg: RotorSpeeds) -> None:
        t = stamp_to_sec(msg.header.stamp)
        speeds = np.asarray(msg.speeds, dtype=np.float64)
        if speeds.shape != (self.num_rotors,):
            self.drops.drop("rotor_count", f"{speeds.size} rotors, model expects {self.num_rotors}")
            return
        if self.rotor_kind == "pwm":
            if msg.kind != RotorSpeeds.KIND_NORMALIZED:
                self.drops.drop("rotor_kind", f"kind {msg.kind}, model was trained on normalised commands")
                return
        elif msg.kind == RotorSpeeds.KIND_RPM:
            speeds = speeds * _RPM_TO_RAD_S
        elif msg.kind != RotorSpeeds.KIND_RAD_PER_SEC:
            self.drops.drop("rotor_kind", f"kind {msg.kind}, model was trained on rotor speeds")
            return
        if not self.predictor.push_rotor(t, speeds):
            self.drops.drop("rotor_rejected", "non-finite or non-increasing stamp")

    def on_imu(self, msg: Imu) -> None:
        t = stamp_to_sec(msg.header.stamp)
        if self._last_imu_t is not None and t < self._last_imu_t - self.config.time_jump_reset:
            self.get_logger().warning(
                f"IMU time jumped back {self._last_imu_t - t:.3f} s (bag loop / clock reset): resetting the window"
            )
            self.drops.counts["time_jump_reset"] += 1
            self.predictor = self._new_predictor()
        a, w = msg.linear_acceleration, msg.angular_velocity
        if not self.predictor.push_imu(t, (a.x, a.y, a.z), (w.x, w.y, w.z)):
            self.drops.drop("imu_rejected", "non-finite value or non-increasing stamp")
            return
        self._last_imu_t = t
        prediction = self.predictor.step()
        if prediction is None:
            return
        if not (np.all(np.isfinite(prediction.velocity)) and np.all(np.isfinite(prediction.variance))):
            self.drops.drop("non_finite_output", "network produced NaN/inf; not published")
            return
        self.publish(msg.header.stamp, prediction)

    # ------------------------------------------------------------------ outputs
    def publish(self, stamp, prediction) -> None:
        v, var = prediction.velocity, prediction.variance
        out = VelocityEstimate()
        out.header.stamp = stamp
        out.header.frame_id = self.config.frame_id
        set_xyz(out.velocity, v)
        out.covariance = np.diag(var).reshape(-1).tolist()
        if prediction.probs is not None:
            out.bin_centers = self._bin_centers
            out.distribution = prediction.probs.astype(np.float32).reshape(-1).tolist()
        self.vel_pub.publish(out)
        if self.twist_pub is not None:
            twist = TwistWithCovarianceStamped()
            twist.header = out.header
            twist.twist.twist.linear = out.velocity
            cov = np.zeros((6, 6))
            cov[:3, :3] = np.diag(var)
            cov[3:, 3:] = np.eye(3) * UNUSED_VARIANCE
            twist.twist.covariance = cov.reshape(-1).tolist()
            self.twist_pub.publish(twist)
        self.published += 1


def main(args: list[str] | None = None) -> None:
    run_node(VeloBinsNetNode, "velobins_net", args)


if __name__ == "__main__":
    main()
