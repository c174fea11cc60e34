"""The EKF node's health: what it measures about its inputs and its filter, and what it reports.

:class:`EkfHealth` gathers what :func:`velobins_common.health.ekf_status` decides on (the table of
levels and causes is in docs/ros_interface.md): input rates and ages, IMU samples lost (holes in
the stamps), the latency IMU stamp -> odometry publish, the windowed NIS test, the filter's IMU
plausibility, the time since its last fused update and its covariance, and the node's events (a
hold over an IMU gap, a restart, a set pose), which stay in the message for ``event_report_time``.
It publishes through the nodes' shared scaffolding, :class:`velobins_ros.health.NodeHealth`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from velobins_common.health import (
    EkfLimits,
    EkfView,
    LatencyMeter,
    NisMonitor,
    RateMeter,
    SampleLoss,
    Status,
    Stream,
    ekf_status,
)
from velobins_ros.health import NodeHealth, count_values

from .events import EVENT_COUNTERS, USED_COUNTERS
from .state import POS, VEL


class EkfHealth:
    """Health of the EKF node ``node`` (an :class:`~velobins_ekf.node.EkfNode`; see module docstring)."""

    def __init__(self, node: Any) -> None:
        self.node = node
        cfg = node.config
        self.imu_meter, self.velocity_meter, self.displacement_meter = RateMeter(), RateMeter(), RateMeter()
        self.imu_loss = SampleLoss()
        self.imu_lost = 0  # samples missing from the stamps since the start (holes up to max_imu_interval)
        self.latency = LatencyMeter()
        self.nis = NisMonitor(cfg.nis_window, alarm_probability=cfg.nis_alarm_probability)
        self.restarts: dict[str, int] = {}
        self._event: tuple[str, float] | None = None  # (what happened, wall time)
        meters = {
            "IMU": self.imu_meter,
            "velocity estimates": self.velocity_meter,
            "displacement estimates": self.displacement_meter,
        }
        self.base = NodeHealth(
            node,
            "EKF",
            node.base_frame,
            cfg.diagnostics_period,
            self.decide,
            meters,
            cfg.silence_warn_after,
            "odometry",
            cfg.startup_grace,
        )
        self.base.drop_counts = self.all_drops
        self.base.extra_values = self.values

    # ------------------------------------------------------------------ what the node tells it
    def report(self, what: str) -> None:
        """Log an event (WARN) and keep it in the diagnostics for ``event_report_time``."""
        self.node.get_logger().warning(what)
        self._event = (what, time.monotonic())

    def restarted(self, why: str) -> None:
        """The filter restarted because of ``why`` (counted by reason)."""
        self.restarts[why] = self.restarts.get(why, 0) + 1
        self.nis.reset()
        self.report(f"filter restarted: {why}")

    def imu_stamp(self, last: float | None, t: float) -> None:
        """An IMU message stamped ``t`` arrived after one stamped ``last``: count the samples missing
        between them (holes shorter than a hold; a hold is reported on its own)."""
        period = self.imu_loss.period()
        if (
            last is not None
            and period is not None
            and 1.5 * period < t - last <= self.node.filter_config.max_imu_interval
        ):
            self.imu_lost += round((t - last) / period) - 1
        self.imu_loss.add(t)

    def hold(self, hold: tuple[float, float], wall_gap: float) -> None:
        """The filter held over an IMU gap ``(last stamp before, first after)``; ``wall_gap`` [s] passed
        between the two messages (much less than the stamps say, on the node's own clock: a jump)."""
        before, after = hold
        gap = after - before
        jumped = wall_gap < 0.5 * gap and not self.node.get_parameter("use_sim_time").value
        what = (
            f"IMU stamps jumped forward {gap:.3f} s ({wall_gap * 1e3:.0f} ms between the messages)"
            if jumped
            else f"IMU gap of {gap:.3f} s"
        )
        self.nis.mark(what)  # the held state is off by what the gap hid: the NIS test names the gap
        self.report(
            f"{what} at t={before:.3f}: filter held (not propagated across it, covariance grown; "
            f"filter.max_imu_interval {self.node.filter_config.max_imu_interval:g} s)"
        )

    # ------------------------------------------------------------------ decision
    def _measurements(self, now: float) -> Stream:
        """The network's measurement stream: displacements once they came last, else velocities."""
        vel, disp = self.velocity_meter, self.displacement_meter
        if disp.last is not None and (vel.last is None or disp.last > vel.last):
            return Stream("displacement estimates", self.node.displacement_sub.topic_name, disp.age(now))
        return Stream("velocity estimates", self.node.velocity_sub.topic_name, vel.age(now))

    def waiting_for(self) -> str:
        """What the filter's start waits for, per init_mode."""
        node = self.node
        mode = node.config.init_mode
        if mode == "ground_truth":
            return f"the first ground-truth pose on {node.gt_sub.topic_name}"
        if mode == "align_at_rest":
            return f"{node.filter_config.init_window:g} s of IMU (gravity alignment at rest)"
        return f"IMU and the first velocity estimate on {node.velocity_sub.topic_name} (or align_at_rest)"

    def _since_update(self) -> float | None:
        """Seconds of IMU time since the last fused update (or since the filter started)."""
        filt = self.node.filter
        if not filt.initialized:
            return None
        return filt.time - (filt.last_update_time if filt.last_update_time is not None else filt.start_time)

    def _sigmas(self) -> tuple[float | None, float | None]:
        """Largest per-axis standard deviation of position [m] and velocity [m/s] (None before a state)."""
        if not self.node.filter.initialized:
            return None, None
        d = np.diag(self.node.filter.covariance)
        return float(np.sqrt(np.max(d[POS]))), float(np.sqrt(np.max(d[VEL])))

    def decide(self, now: float, drops: dict[str, int]) -> Status:
        """The node's level and message now (:func:`~velobins_common.health.ekf_status`)."""
        node, cfg = self.node, self.node.config
        event = None
        if self._event is not None and now - self._event[1] <= cfg.event_report_time:
            event = self._event[0]
        pos_sigma, vel_sigma = self._sigmas()
        fault = node.filter.imu_fault
        view = EkfView(
            imu=Stream("IMU", node.imu_sub.topic_name, self.imu_meter.age(now)),
            measurements=self._measurements(now),
            initialised=node.filter.initialized,
            waiting_for=self.waiting_for(),
            imu_fault=None if fault is None else fault.message,
            since_update=self._since_update(),
            pos_sigma=pos_sigma,
            vel_sigma=vel_sigma,
            nis=self.nis,
            event=event,
            imu_loss=self.imu_loss.loss(),
            latency_p95=self.latency.percentile(0.95),
            drops=drops,
        )
        limits = EkfLimits(
            cfg.input_timeout,
            cfg.imu_error_after,
            cfg.update_warn_after,
            cfg.update_error_after,
            cfg.pos_sigma_warn,
            cfg.pos_sigma_error,
            cfg.vel_sigma_warn,
            cfg.vel_sigma_error,
            cfg.imu_loss_warn,
            cfg.latency_warn,
        )
        return ekf_status(view, limits)

    def values(self, now: float) -> dict[str, str]:
        """The EKF's own key-values on /diagnostics (besides the input rates and drops)."""
        filt = self.node.filter
        stats = filt.stats
        loss, period = self.imu_loss.loss(), self.imu_loss.period()
        values = {
            "initialised": str(filt.initialized).lower(),
            "IMU stamp rate [Hz]": "n/a" if not period else f"{1.0 / period:.1f}",
            "IMU loss (last 2 s)": "n/a" if loss is None else f"{loss:.3f}",
            "IMU samples lost": str(self.imu_lost),
        }
        for q in (0.5, 0.95):
            lat = self.latency.percentile(q)
            values[f"latency IMU stamp -> odometry p{q * 100:.0f} [ms]"] = "n/a" if lat is None else f"{lat * 1e3:.1f}"
        values["resets"] = str(sum(self.restarts.values()))
        values.update(count_values("restarts", self.restarts))
        values.update({k.replace("_", " "): str(getattr(stats, k)) for k in EVENT_COUNTERS})
        values["updates fused"] = str(stats.meas_applied + stats.disp_applied)
        values["displacement updates fused"] = str(stats.disp_applied)
        since = self._since_update()
        if since is not None:
            pos_sigma, vel_sigma = self._sigmas()
            values["since last fused update [s]"] = f"{since:.3f}"
            values["position sigma [m]"] = f"{pos_sigma:.3f}"
            values["velocity sigma [m/s]"] = f"{vel_sigma:.3f}"
        values.update(self.nis.values())
        return values

    def all_drops(self) -> dict[str, int]:
        """The node's drops by reason and the filter's own rejections (its non-zero stats counters)."""
        stats = {k: v for k, v in vars(self.node.filter.stats).items() if k not in USED_COUNTERS + EVENT_COUNTERS}
        return {**self.node.drops.counts, **{f"filter_{k}": v for k, v in stats.items() if v}}

    def check_silence(self) -> None:
        """Throttled WARN naming the cause when no odometry went out for silence_warn_after s."""
        self.base.check_silence(self.node.config.input_timeout, lambda now: self.decide(now, {}).message)

    def odometry_published(self, stamp_ns: int) -> None:
        """Odometry of the IMU stamp ``stamp_ns`` [ns] just went out: its latency on the node's clock."""
        self.base.mark_output()
        self.latency.add((self.node.get_clock().now().nanoseconds - stamp_ns) * 1e-9)
