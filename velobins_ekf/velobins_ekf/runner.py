"""Time handling around the EKF core: timestamped IMU and velocity streams in, fused state out.

:class:`VelocityEkf` is what the ROS node and the offline evaluation drive:

* IMU samples propagate the filter over each interval with the mean of the two bounding samples
  (second-order accurate, see :mod:`velobins_ekf.propagation`);
* a velocity measurement stamped between IMU samples waits until the IMU stream passes its stamp,
  then the filter propagates to the stamp (IMU linearly interpolated), updates, and propagates on;
* a measurement older than the current state (network latency, reordering) is applied at its own
  stamp: the filter restores the newest snapshot at or before the stamp and re-propagates the
  stored IMU samples, re-applying the later measurements too, so the result equals in-order
  processing. Older than ``history_length`` → dropped and counted;
* a displacement over ``[t_s, t_e]`` (TLIO, EqNIO, IMO) is fused at ``t_e`` against a clone of the
  pose at ``t_s`` (:mod:`velobins_ekf.clone`). Clones are events like measurements: asked for ahead
  (:meth:`VelocityEkf.request_clone`) or, when a displacement arrives without one, created at
  ``t_s`` by the same re-propagation (``history_length`` must then cover window + latency). A clone
  is marginalised once the displacements that start at it are fused;
* non-finite inputs, non-increasing IMU stamps, duplicate measurement stamps and invalid
  covariances are rejected and counted in :class:`FilterStats`; nothing non-finite reaches the core;
* an IMU interval longer than ``max_imu_interval`` (a gap, or stamps jumping forward) is never
  propagated: the filter holds (:mod:`velobins_ekf.integrity`), counted in ``imu_gaps``, and
  :meth:`VelocityEkf.pop_holds` tells the caller; the IMU's specific force is checked for
  plausibility over every ``imu_check_window`` (:attr:`VelocityEkf.imu_fault`).

Without an explicit :meth:`VelocityEkf.initialize`, the filter aligns itself with gravity from the
last ``init_window`` seconds of IMU and takes its velocity from the first measurement, or zero at
rest (:meth:`VelocityEkf.align_at_rest`); an implausible IMU refuses the start
(:class:`~velobins_ekf.initial_state.AlignmentWindow`). :meth:`VelocityEkf.set_pose` and
:meth:`VelocityEkf.restart` serve a node's set_pose and reset; a pose set is an event at its stamp
like a measurement (ahead: it waits; behind: re-propagation), so its latency does not matter.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import fields

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.displacement import DisplacementResult
from velobins_ekf.ekf import ErrorStateEkf, NavState, UpdateResult
from velobins_ekf.events import CLONE, DISPLACEMENT, POSE, VELOCITY, Event, FilterStats, Snapshot, is_spd
from velobins_ekf.history import History
from velobins_ekf.initial_state import AlignmentWindow, Sample
from velobins_ekf.integrity import ImuFault, SpecificForceMonitor, gap_inflation
from velobins_ekf.lifecycle import Lifecycle
from velobins_ekf.state import with_pose


class VelocityEkf(History, Lifecycle):
    """Streaming velocity-aided EKF with out-of-order measurement handling (see module docstring).

    Args:
        config: filter configuration (:class:`EkfConfig` defaults when omitted).
        keep_updates: append an :class:`UpdateResult` per fused measurement to :attr:`updates`.
            A late measurement re-creates the records after its stamp, replacing the old ones.
    """

    def __init__(self, config: EkfConfig | None = None, keep_updates: bool = True):
        self.config = config if config is not None else EkfConfig()
        self.ekf = ErrorStateEkf(self.config)
        self.stats = FilterStats()
        self.keep_updates = keep_updates
        self.updates: list[UpdateResult] = []
        self.displacement_updates: list[DisplacementResult] = []
        self._t: float | None = None  # time of the filter state
        self._sample: Sample | None = None  # IMU value at the state time
        self._last_imu_t: float | None = None
        self._imu: deque[tuple[float, Sample]] = deque()
        self._pending: list[Event] = []
        self._applied: deque[Event] = deque()
        self._snaps: deque[Snapshot] = deque()
        self._last_snap_t = -math.inf
        self._align = AlignmentWindow(self.config)
        self.imu_check = SpecificForceMonitor(self.config)
        self.init_fault: ImuFault | None = None  # why the last self-initialisation was refused
        self.last_update_time: float | None = None  # stamp of the newest fused update
        self.start_time: float | None = None  # stamp the filter (last) started at
        self._holds: list[tuple[float, float]] = []

    # ------------------------------------------------------------------ public API
    @property
    def initialized(self) -> bool:
        """True once the filter has a state (explicitly or by alignment)."""
        return self._t is not None

    @property
    def time(self) -> float | None:
        """Stamp [s] of the current filter state (None before initialisation)."""
        return self._t

    @property
    def imu_fault(self) -> ImuFault | None:
        """What is implausible about the IMU: why the filter refuses to initialise itself, or what the
        last full ``imu_check_window`` showed once running; None when nothing is."""
        return self.imu_check.fault if self._t is not None else self.init_fault

    def pop_holds(self) -> list[tuple[float, float]]:
        """Return and forget the holds since the last call: ``(last stamp before, first after)`` of
        each IMU gap the filter did not propagate across."""
        out, self._holds = self._holds, []
        return out

    def pop_displacement_updates(self) -> list[DisplacementResult]:
        """Return and forget the displacement update records so far (see :meth:`pop_updates`)."""
        out, self.displacement_updates = self.displacement_updates, []
        return out

    def set_config(self, config: EkfConfig) -> None:
        """Use ``config`` from now on; only :meth:`EkfConfig.live_fields` (noise model, gate) may differ.

        Intervals already propagated keep the noise they were propagated with; a late measurement
        that re-propagates from a snapshot uses the new values. Not for a filter recording poses
        (:meth:`record_poses`): the core is rebuilt around its current state and covariance.
        """
        frozen = {f.name for f in fields(config)} - config.live_fields()
        changed = sorted(n for n in frozen if getattr(config, n) != getattr(self.config, n))
        if changed:
            raise ValueError(f"VelocityEkf.set_config: {', '.join(changed)} cannot change on a running filter")
        self.ekf.flush()  # queued intervals are propagated with the noise they were sampled under
        self.config = config
        self._align.config = self.imu_check.config = config
        err = self.ekf.velocity_error  # not live: the same model, so its estimate carries over
        self.ekf = ErrorStateEkf(config, self.ekf.state, self.ekf.cov)
        self.ekf.set_velocity_error(err)

    def add_imu(self, t: float, acc: np.ndarray, gyro: np.ndarray) -> bool:
        """Feed one IMU sample: stamp [s], specific force [m/s²] and rate [rad/s] (body frame).

        Returns False (and counts why) when the sample is rejected.
        """
        try:
            s: Sample = (
                float(acc[0]),
                float(acc[1]),
                float(acc[2]),
                float(gyro[0]),
                float(gyro[1]),
                float(gyro[2]),
            )
            t = float(t)
        except (TypeError, IndexError, ValueError):
            self.stats.imu_nonfinite += 1
            return False
        if not math.isfinite(t + s[0] + s[1] + s[2] + s[3] + s[4] + s[5]):
            self.stats.imu_nonfinite += 1
            return False
        last = self._last_imu_t
        if last is not None and t <= last:
            if t == last:
                self.stats.imu_duplicate += 1
            else:
                self.stats.imu_out_of_order += 1
            return False
        self._last_imu_t = t
        self.stats.imu_used += 1
        if last is not None and t - last > self.config.max_imu_interval:
            self.imu_check.restart()
        self.imu_check.add(t, s[0], s[1], s[2])
        if self._t is None:
            self._align.add(t, s)
            return True
        if t <= self._t:  # before the (explicit) initial stamp: best value at the state time so far
            self._sample = s
            if self._snaps and self._snaps[-1].t == self._t:  # a replay from there starts with it too
                self._snaps[-1].sample = s
            return True
        if t - self._t > self.config.max_imu_interval:
            self._hold(t, s)
            return True
        self._imu.append((t, s))
        self._advance(t, s)
        return True

    def add_velocity(self, t: float, z_body: np.ndarray, cov: np.ndarray) -> bool:
        """Feed one body-frame velocity measurement (stamp [s], (3,) [m/s], (3, 3) [m²/s²]).

        Measurements ahead of the IMU stream wait for it; older ones are applied by
        re-propagation. Returns False (and counts why) when the measurement is dropped.
        """
        try:
            z = np.array(z_body, dtype=np.float64).reshape(3)
            r = np.array(cov, dtype=np.float64)
            t = float(t)
        except (TypeError, ValueError):
            self.stats.meas_nonfinite += 1
            return False
        if not (math.isfinite(t) and np.all(np.isfinite(z)) and np.all(np.isfinite(r))):
            self.stats.meas_nonfinite += 1
            return False
        if r.shape != (3, 3) or not is_spd(r):
            self.stats.meas_bad_covariance += 1
            return False
        m = Event(t, z, 0.5 * (r + r.T))
        if self._t is None:
            return self._try_align(m)
        if self._is_duplicate(t):
            self.stats.meas_duplicate += 1
            return False
        if t > self._t:
            bisect.insort(self._pending, m)
            waiting = [i for i, e in enumerate(self._pending) if e.kind == VELOCITY]  # not a pose, clone, window
            if len(waiting) > self.config.max_pending:
                self._pending.pop(waiting[0])
                self.stats.meas_pending_overflow += 1
            return True
        if t == self._t and not (self._applied and self._applied[-1] > m):  # else a pose set at t goes after it
            self._apply(m)
            return True
        return self._apply_late(m)

    def request_clone(self, t: float) -> bool:
        """Clone the pose at stamp ``t`` (a displacement window's start), now or when the IMU
        reaches ``t``; a past ``t`` re-propagates. False when older than the history (counted in
        ``disp_too_old``) or before initialisation, or with ``velocity_error_sigma`` > 0 (counted in
        ``disp_invalid``: that error models velocity measurements); True when that clone is already asked for."""
        if self.config.velocity_error_sigma > 0:
            self.stats.disp_invalid += 1
            return False
        if self._t is None or not math.isfinite(t) or self._event_at(float(t), CLONE) is not None:
            return self._t is not None and math.isfinite(t)
        return self._schedule([Event(float(t), None, None, kind=CLONE)])  # type: ignore[arg-type]

    def add_displacement(self, t_start: float, t_end: float, dz: np.ndarray, cov: np.ndarray) -> bool:
        """Feed a displacement ``dz`` (3,) [m] over ``[t_start, t_end]`` with covariance (3, 3) [m²]
        (frame: ``config.displacement_yaw_frame``). Fused at ``t_end`` against the clone at
        ``t_start``, which is made if missing. Returns False (and counts why) when dropped."""
        try:
            z, r = np.array(dz, dtype=np.float64).reshape(3), np.array(cov, dtype=np.float64)
            ts, te = float(t_start), float(t_end)
        except (TypeError, ValueError):
            self.stats.disp_invalid += 1
            return False
        ok = math.isfinite(ts + te) and ts < te and np.all(np.isfinite(z)) and np.all(np.isfinite(r))
        ok = ok and self.config.velocity_error_sigma == 0  # b models velocity measurements: no clones beside it
        if not (ok and r.shape == (3, 3) and is_spd(r) and self._t is not None):
            self.stats.disp_invalid += 1
            return False
        if any(e.kind == DISPLACEMENT and e.t == te and e.t_start == ts for e in (*self._pending, *self._applied)):
            self.stats.disp_invalid += 1
            return False
        events = [Event(te, z, 0.5 * (r + r.T), kind=DISPLACEMENT, t_start=ts)]
        replay_from = None
        if self.ekf.clones.index(ts) < 0 and self._event_at(ts, CLONE, self._pending) is None:
            if self._event_at(ts, CLONE) is None:
                events.append(Event(ts, None, None, kind=CLONE))  # type: ignore[arg-type]
            else:  # made and already marginalised: made again by re-propagation from before ts
                replay_from = Event(ts, None, None, kind=CLONE)  # type: ignore[arg-type]
        return self._schedule(events, replay_from)

    @property
    def state(self) -> NavState:
        """Current nominal state (a copy)."""
        return self.ekf.state.copy()

    def write_pose(self, pos: np.ndarray, rot: np.ndarray, vel: np.ndarray) -> None:
        """Copy world position (3,), body->world rotation (3, 3) and world velocity (3,) at
        :attr:`time` into the given arrays (a caller recording every IMU sample allocates nothing)."""
        st = self.ekf.state
        pos[...] = st.pos
        rot[...] = st.rot
        vel[...] = st.vel

    def record_poses(self, pos: np.ndarray, rot: np.ndarray, vel: np.ndarray) -> None:
        """Arrays (M, 3), (M, 3, 3) and (M, 3) that :meth:`mark_pose` fills row by row."""
        self.ekf.record_poses(pos, rot, vel)

    def mark_pose(self, row: int) -> None:
        """Have row ``row`` of the :meth:`record_poses` arrays hold the pose at :attr:`time`
        (world position, body->world rotation, world velocity), written when the filter next
        applies its queued intervals: a caller recording every IMU sample leaves the filter its
        block propagation (:class:`~velobins_ekf.ekf.ErrorStateEkf`)."""
        self.ekf.mark_pose(row)

    def pop_updates(self) -> list[UpdateResult]:
        """Return and forget the update records so far (a long-running node must drain them).

        A late measurement re-fuses the measurements after its stamp; their new records then
        appear again (same stamps, values that include the late one).
        """
        out, self.updates = self.updates, []
        return out

    @property
    def position(self) -> np.ndarray:
        """World position [m] at :attr:`time`."""
        return self.ekf.position

    @property
    def quaternion(self) -> np.ndarray:
        """Body->world quaternion ``(x, y, z, w)`` at :attr:`time`."""
        return self.ekf.quaternion

    @property
    def velocity_world(self) -> np.ndarray:
        """World velocity [m/s] at :attr:`time`."""
        return self.ekf.velocity_world

    @property
    def velocity_body(self) -> np.ndarray:
        """Body velocity ``Rᵀ v`` [m/s] at :attr:`time`."""
        return self.ekf.velocity_body

    @property
    def covariance(self) -> np.ndarray:
        """15x15 error-state covariance (see :mod:`velobins_ekf.state` for the order)."""
        return self.ekf.covariance

    def pose_covariance_ros(self) -> np.ndarray:
        """6x6 pose covariance, ROS order (x, y, z, rotX, rotY, rotZ), rotation about odom axes."""
        return self.ekf.pose_covariance_ros()

    def twist_covariance_body(self) -> np.ndarray:
        """3x3 covariance of the body-frame velocity (Odometry twist, linear part)."""
        return self.ekf.twist_covariance_body()

    def angular_rate(self, gyro: np.ndarray) -> np.ndarray:
        """Bias-corrected body rate ``ω − b_g`` [rad/s] of a raw gyro sample (Odometry twist, angular part)."""
        return np.asarray(gyro, dtype=np.float64).reshape(3) - self.ekf.state.gyro_bias

    def twist_covariance(self, imu_dt: float) -> np.ndarray:
        """6x6 covariance of the Odometry twist (body linear velocity, :meth:`angular_rate`), ROS
        order; ``imu_dt`` [s] is the IMU sample period, which sets the rate's white-noise variance."""
        return self.ekf.twist_covariance(imu_dt)

    # ------------------------------------------------------------------ internals
    def _hold(self, t: float, s: Sample) -> None:
        """An IMU gap to ``t``: keep the state, grow its covariance (:func:`gap_inflation`), drop the
        events stamped inside the gap (but set the last pose set there, at ``t``) and the history
        before it, and go on from ``t``."""
        t_before, gap = self._t, t - self._t
        if self._sample is not None:  # else no IMU since an explicit initialisation: nothing to hold
            st = self.ekf.state.copy()
            self.ekf.reset(st, self.ekf.cov + gap_inflation(st, self.config, gap))
            self.stats.imu_gaps += 1
            self._holds.append((t_before, t))
        inside = [e for e in self._pending if e.t < t]
        self.stats.meas_in_gap += sum(e.kind not in (CLONE, POSE) for e in inside)
        self._pending = [e for e in self._pending if e.t >= t]
        self._t, self._sample = t, s
        poses = [e for e in inside if e.kind == POSE]
        if poses:  # a pose set inside the gap is the best pose there is after it: set at its end
            poses[-1].t = t
            self._apply(poses[-1])
        self._forget_history()
        while self._pending and self._pending[0].t == t:
            self._apply(self._pending.pop(0))

    def _advance(self, t1: float, s1: Sample) -> None:
        """Apply pending measurements up to ``t1`` at their stamps, then propagate to ``t1``."""
        pending = self._pending
        if not pending or pending[0].t > t1:  # hot path: one IMU interval, nothing to apply
            self._propagate_to(t1, s1)
            if t1 - self._last_snap_t >= self.config.snapshot_period:
                self._take_snapshot()
            return
        while pending and pending[0].t <= t1:
            m = pending.pop(0)
            t0 = self._t
            s0 = self._sample if self._sample is not None else s1
            w = (m.t - t0) / (t1 - t0) if t1 > t0 else 1.0  # a second event on the same IMU stamp
            sm: Sample = tuple(a + w * (b - a) for a, b in zip(s0, s1, strict=True))  # type: ignore[assignment]
            self._propagate_to(m.t, sm)
            self._apply(m)
        self._propagate_to(t1, s1)
        if t1 - self._last_snap_t >= self.config.snapshot_period:
            self._take_snapshot()

    def _propagate_to(self, t: float, s: Sample) -> None:
        """Propagate to ``t``, where the IMU reads ``s``, with the mean of the interval's bounding
        samples (the mid-sample step that makes the scheme second order)."""
        dt = t - self._t
        s0 = self._sample if self._sample is not None else s
        if dt > 0.0:
            self.ekf.propagate(
                dt,
                (0.5 * (s0[0] + s[0]), 0.5 * (s0[1] + s[1]), 0.5 * (s0[2] + s[2])),
                (0.5 * (s0[3] + s[3]), 0.5 * (s0[4] + s[4]), 0.5 * (s0[5] + s[5])),
            )
            self._t = t
        self._sample = s

    def _apply(self, m: Event) -> None:
        if m.kind != VELOCITY:
            self._apply_event(m)
            return
        res = self.ekf.update_velocity_unchecked(m.z, m.cov, stamp=m.t)
        if res.accepted:
            self.last_update_time = max(m.t, self.last_update_time or -math.inf)
        if not m.counted:
            m.counted = True
            if res.accepted:
                self.stats.meas_applied += 1
            else:
                self.stats.meas_gated += 1
        if self.keep_updates:
            self.updates.append(res)
        self._applied.append(m)
        self._take_snapshot()

    def _apply_event(self, m: Event) -> None:
        """Apply a clone, displacement or pose event (see :meth:`_apply` for velocity)."""
        if m.kind == POSE:
            state, cov = with_pose(self.ekf.state, self.ekf.cov, m.z, m.rot, m.cov, self.config)
            self.ekf.reset(state, cov)  # also drops the clones: no displacement spans a pose set
            self.stats.pose_sets += not m.counted
            m.counted = True
        elif m.kind == CLONE:
            self.stats.clones_dropped += self.ekf.clone_pose(m.t)
        elif self.ekf.clones.index(m.t_start) < 0:  # its clone was marginalised (max_clones)
            self.stats.disp_too_old += not m.counted
            m.counted = True
        else:
            res = self.ekf.update_displacement(m.t_start, m.z, m.cov, stamp=m.t)
            if res.accepted:
                self.last_update_time = max(m.t, self.last_update_time or -math.inf)
            if not m.counted:
                m.counted = True
                self.stats.disp_applied += res.accepted
                self.stats.disp_gated += not res.accepted
            if self.keep_updates:
                self.displacement_updates.append(res)
            if not any(e.kind == DISPLACEMENT and e.t_start == m.t_start for e in self._pending):
                self.ekf.drop_clone(m.t_start)  # no pending window starts at it any more
        self._applied.append(m)
        self._take_snapshot()
