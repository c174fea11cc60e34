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
  covariances are rejected and counted in :class:`FilterStats`; nothing non-finite reaches the core.

Without an explicit :meth:`VelocityEkf.initialize`, the filter aligns itself with gravity from the
last ``init_window`` seconds of IMU and takes its velocity from the first measurement
(:mod:`velobins_ekf.initial_state`).
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
from velobins_ekf.events import CLONE, DISPLACEMENT, VELOCITY, Event, FilterStats, Sample, Snapshot, is_spd
from velobins_ekf.initial_state import state_from_alignment


class VelocityEkf:
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
        self._init_buf: deque[tuple[float, Sample]] = deque()

    # ------------------------------------------------------------------ public API
    @property
    def initialized(self) -> bool:
        """True once the filter has a state (explicitly or by alignment)."""
        return self._t is not None

    @property
    def time(self) -> float | None:
        """Stamp [s] of the current filter state (None before initialisation)."""
        return self._t

    def initialize(self, t: float, state: NavState, cov: np.ndarray | None = None) -> None:
        """Start the filter at stamp ``t`` from a full state (e.g. ground truth in evaluation)."""
        if not math.isfinite(t):
            raise ValueError(f"VelocityEkf.initialize: stamp must be finite, got {t!r}")
        self.ekf.reset(state, cov)
        self._t = float(t)
        self._sample = None
        self._imu.clear()
        self._pending.clear()
        self._applied.clear()
        self._snaps.clear()
        self._init_buf.clear()
        self._take_snapshot()

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
        self.ekf = ErrorStateEkf(config, self.ekf.state, self.ekf.cov)

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
        if self._t is None:
            self._init_buf.append((t, s))
            while self._init_buf and self._init_buf[0][0] < t - self.config.init_window:
                self._init_buf.popleft()
            return True
        if t <= self._t:  # before the (explicit) initial stamp: best value at the state time so far
            self._sample = s
            if self._snaps and self._snaps[-1].t == self._t:  # a replay from there starts with it too
                self._snaps[-1].sample = s
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
            if len(self._pending) > self.config.max_pending:
                self._pending.pop(0)
                self.stats.meas_pending_overflow += 1
            return True
        if t == self._t:
            self._apply(m)
            return True
        return self._apply_late(m)

    def request_clone(self, t: float) -> bool:
        """Clone the pose at stamp ``t`` (a displacement window's start), now or when the IMU
        reaches ``t``; a past ``t`` re-propagates. False when older than the history (counted in
        ``disp_too_old``) or before initialisation; True when that clone is already asked for."""
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
    def _advance(self, t1: float, s1: Sample) -> None:
        """Apply pending measurements up to ``t1`` at their stamps, then propagate to ``t1``."""
        pending = self._pending
        if not pending or pending[0].t > t1:  # hot path: one IMU interval, nothing to apply
            s0 = self._sample if self._sample is not None else s1
            self.ekf.propagate(
                t1 - self._t,
                (0.5 * (s0[0] + s1[0]), 0.5 * (s0[1] + s1[1]), 0.5 * (s0[2] + s1[2])),
                (0.5 * (s0[3] + s1[3]), 0.5 * (s0[4] + s1[4]), 0.5 * (s0[5] + s1[5])),
            )
            self._t = t1
            self._sample = s1
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
        """Apply a clone or displacement event (see :meth:`_apply` for velocity)."""
        if m.kind == CLONE:
            self.stats.clones_dropped += self.ekf.clone_pose(m.t)
        elif self.ekf.clones.index(m.t_start) < 0:  # its clone was marginalised (max_clones)
            self.stats.disp_too_old += not m.counted
            m.counted = True
        else:
            res = self.ekf.update_displacement(m.t_start, m.z, m.cov, stamp=m.t)
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

    def _event_at(self, t: float, kind: int, where: list[Event] | None = None) -> Event | None:
        """The pending or applied (or only those in ``where``) event of ``kind`` stamped ``t``."""
        events = where if where is not None else (*self._pending, *self._applied)
        return next((e for e in events if e.kind == kind and e.t == t), None)

    def _schedule(self, events: list[Event], replay_from: Event | None = None) -> bool:
        """Queue clone/displacement events; those at or before the state time (or ``replay_from``)
        are applied by re-propagation from the newest snapshot that precedes them."""
        past = [e for e in events if e.t <= self._t] + ([replay_from] if replay_from else [])
        if not past:
            self._pending = sorted([*self._pending, *events])
            return True
        ok = self._replay(min(past), events)
        counter = "disp_late" if ok else "disp_too_old"
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        return ok

    def _apply_late(self, m: Event) -> bool:
        ok = self._replay(m, [m])
        if ok:
            self.stats.meas_late += 1
        else:
            self.stats.meas_too_old += 1
        return ok

    def _replay(self, first: Event, new: list[Event]) -> bool:
        """Restore the newest snapshot before ``first`` (at its stamp only when no later-ordered event
        was applied there), queue ``new`` and re-apply IMU and events after it."""
        snap = None
        for cand in reversed(self._snaps):
            if cand.t < first.t or (cand.t == first.t and not any(a.t == first.t and a > first for a in self._applied)):
                snap = cand
                break
        if snap is None:
            return False
        # restore the snapshot, forget everything after it, then replay IMU + measurements
        while self._snaps[-1] is not snap:
            self._snaps.pop()
        self._last_snap_t = snap.t
        self.ekf.reset(snap.state, snap.cov)
        if snap.clones is not None:
            self.ekf.set_clones(snap.clones)
        self._t = snap.t
        self._sample = snap.sample
        redo = [a for a in self._applied if a.t > snap.t]
        while self._applied and self._applied[-1].t > snap.t:
            self._applied.pop()
        if self.keep_updates:
            while self.updates and self.updates[-1].stamp > snap.t:
                self.updates.pop()
            while self.displacement_updates and self.displacement_updates[-1].stamp > snap.t:
                self.displacement_updates.pop()
        self._pending = sorted([*redo, *new, *self._pending])
        while self._pending and self._pending[0].t == self._t:
            self._apply(self._pending.pop(0))
        for t_imu, s in [item for item in self._imu if item[0] > snap.t]:
            self._advance(t_imu, s)
        return True

    def _take_snapshot(self) -> None:
        """Store the state at ``self._t`` (re-propagation start point) and drop expired history."""
        clones = self.ekf.clones.copy() if len(self.ekf.clones) else None
        self._snaps.append(Snapshot(self._t, self.ekf.state.copy(), self.ekf.cov.copy(), self._sample, clones))
        self._last_snap_t = self._t
        self._prune(self._t)

    def _prune(self, t_now: float) -> None:
        """Drop history older than ``history_length`` (keeping one snapshot at or before it)."""
        horizon = t_now - self.config.history_length
        snaps = self._snaps
        while len(snaps) > 1 and snaps[1].t <= horizon:
            snaps.popleft()
        t_oldest = snaps[0].t
        while self._imu and self._imu[0][0] <= t_oldest:
            self._imu.popleft()
        while self._applied and self._applied[0].t <= t_oldest:
            self._applied.popleft()

    def _is_duplicate(self, t: float) -> bool:
        i = bisect.bisect_left(self._pending, Event(t, None, None))  # type: ignore[arg-type]
        if i < len(self._pending) and self._pending[i].t == t and self._pending[i].kind == VELOCITY:
            return True
        return any(a.t == t and a.kind == VELOCITY for a in reversed(self._applied))

    def _try_align(self, m: Event) -> bool:
        buf = self._init_buf
        span = buf[-1][0] - buf[0][0] if len(buf) >= 2 else 0.0
        if span < 0.5 * self.config.init_window:
            self.stats.meas_before_init += 1
            return False
        acc = np.array([s[0:3] for _, s in buf])
        try:
            state = state_from_alignment(acc, m.z, yaw=self.config.init_yaw, gravity=self.config.gravity)
        except ValueError:
            self.stats.meas_before_init += 1
            return False
        t_last, s_last = buf[-1]
        self.initialize(t_last, state)
        self._sample = s_last
        return True
