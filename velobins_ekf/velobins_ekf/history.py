"""Re-propagation history of the streaming filter: snapshots, and late events applied at their stamps.

:class:`History` is the part of :class:`~velobins_ekf.runner.VelocityEkf` that keeps the last
``history_length`` seconds of IMU samples, applied events and state snapshots, and applies an event
older than the state (a late measurement, a clone in the past, a pose set late) by restoring the newest snapshot
before it and re-applying the IMU and the events after it: the result equals in-order processing.
It works on the runner's state (``ekf``, ``_t``, ``_sample``, ``_imu``, ``_pending``, ``_applied``,
``_snaps``) and calls back its ``_apply`` and ``_advance``.
"""

from __future__ import annotations

import bisect
from collections import deque

from velobins_ekf.ekf import ErrorStateEkf
from velobins_ekf.events import VELOCITY, Event, FilterStats, Snapshot
from velobins_ekf.initial_state import Sample


class History:
    """Snapshots and replay (mixed into :class:`~velobins_ekf.runner.VelocityEkf`; see module docstring)."""

    ekf: ErrorStateEkf
    stats: FilterStats
    keep_updates: bool
    _t: float | None
    _sample: Sample | None
    _imu: deque[tuple[float, Sample]]
    _pending: list[Event]
    _applied: deque[Event]
    _snaps: deque[Snapshot]
    _last_snap_t: float

    def _forget_history(self) -> None:
        """Drop the IMU, events and snapshots before now (a hold: no re-propagation may cross it) and
        take a snapshot of the current state."""
        self._imu.clear()
        self._applied.clear()
        self._snaps.clear()
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
        self.ekf.set_velocity_error(snap.velocity_error)
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
        err = self.ekf.velocity_error
        snap = Snapshot(self._t, self.ekf.state.copy(), self.ekf.cov.copy(), self._sample, clones, err and err.copy())
        self._snaps.append(snap)
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
