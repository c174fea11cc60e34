"""How the streaming filter starts, restarts and is re-posed: an explicit start, the self-alignment of
``init_mode: align`` (gravity from the last ``init_window`` of IMU; an implausible IMU refuses it), the reset
service's restart, and set_pose, a pose event at its stamp.

:class:`Lifecycle` is mixed into :class:`~velobins_ekf.runner.VelocityEkf`; it works on the runner's state
and calls back its ``_apply`` and the history's ``_replay`` and ``_take_snapshot``
(:mod:`velobins_ekf.history`).
"""

from __future__ import annotations

import bisect
import math
from collections import deque

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import ErrorStateEkf, NavState
from velobins_ekf.events import POSE, Event, FilterStats, Snapshot
from velobins_ekf.initial_state import AlignmentWindow, Sample
from velobins_ekf.integrity import ImuFault, SpecificForceMonitor


class Lifecycle:
    """Start, alignment, restart and set_pose (mixed into :class:`~velobins_ekf.runner.VelocityEkf`)."""

    config: EkfConfig
    ekf: ErrorStateEkf
    stats: FilterStats
    keep_updates: bool
    init_fault: ImuFault | None
    start_time: float | None
    imu_check: SpecificForceMonitor
    _t: float | None
    _sample: Sample | None
    _last_imu_t: float | None
    _imu: deque[tuple[float, Sample]]
    _pending: list[Event]
    _applied: deque[Event]
    _snaps: deque[Snapshot]
    _align: AlignmentWindow

    def initialize(self, t: float, state: NavState, cov: np.ndarray | None = None) -> None:
        """Start the filter at stamp ``t`` from a full state (e.g. ground truth in evaluation)."""
        if not math.isfinite(t):
            raise ValueError(f"VelocityEkf.initialize: stamp must be finite, got {t!r}")
        self.ekf.reset(state, cov)
        self._t = self.start_time = float(t)
        self._sample = None
        self._imu.clear()
        self._pending.clear()
        self._applied.clear()
        self._snaps.clear()
        self._align.clear()
        self.init_fault = None
        self.imu_check.restart()
        self.stats.initialisations += 1
        self._take_snapshot()

    def align_at_rest(self) -> bool:
        """Start the filter at rest (zero velocity) once ``init_window`` seconds of IMU arrived: roll
        and pitch from their mean specific force, yaw ``init_yaw``; at the newest sample's stamp.

        For a vehicle whose network needs the filter's attitude (TLIO, EqNIO, IMO, AirIO), which so
        cannot give the first measurement :meth:`add_velocity` aligns with. Call it after each IMU
        sample until it returns True. An implausible window (:attr:`imu_fault`) is refused, counted
        in ``init_refused``, and the window starts again.
        """
        if self._t is not None:
            return True
        out = self._align.align(np.zeros(3), self.config.init_window)
        if isinstance(out, ImuFault):
            self._align.clear()
        return self._start_aligned(out)

    def restart(self) -> None:
        """Back to uninitialised (a reset service, a stamp jump backwards): the filter starts again
        as it started the first time. Counters are kept."""
        stats = self.stats
        self.__init__(self.config, self.keep_updates)
        self.stats = stats
        stats.restarts += 1

    def set_pose(
        self, pos: np.ndarray, rot: np.ndarray, cov6: np.ndarray | None = None, t: float | None = None
    ) -> bool:
        """Set the position (3,) [m] and body->world attitude (3, 3) of the filter at stamp ``t``, as
        robot_localization's set_pose does: velocity (in the body frame) and biases are kept, the pose's
        covariance is ``cov6`` (6x6, ROS order ``x, y, z, rotX, rotY, rotZ``, rotation about the world
        axes; the initial sigmas when it is None or not positive definite), uncorrelated with the rest.

        The pose is an event like a measurement, so it lands where it belongs whatever its latency: a
        stamp ahead of the state waits for the IMU to reach it; one behind it is set by re-propagation
        (the IMU and the measurements after it move on from the new pose). Setting a pose of time ``t``
        at another time would leave the attitude wrong by the rotation in between, which the velocity
        updates then fight for seconds. ``t`` None sets it at the current state time; so does a stamp
        older than the stored history or more than ``history_length`` ahead of the state (another
        clock's), counted in ``pose_stale``. A filter not initialised yet starts at
        rest with this pose (at ``t``, else the newest IMU stamp).

        Returns False when the pose was stale (set at the state time instead of ``t``), else True.
        """
        pos = np.asarray(pos, dtype=np.float64).reshape(3)
        rot = np.asarray(rot, dtype=np.float64).reshape(3, 3)
        if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(rot))):
            raise ValueError("VelocityEkf.set_pose: position and attitude must be finite")
        if t is not None and not math.isfinite(t):
            raise ValueError(f"VelocityEkf.set_pose: stamp must be finite, got {t!r}")
        if self._t is None:
            start = t if t is not None else self._last_imu_t
            if start is None:
                raise ValueError("VelocityEkf.set_pose: the filter has no time yet (no IMU): give a stamp")
            self.initialize(start, NavState(rot, np.zeros(3), pos, np.zeros(3), np.zeros(3)))
            t = None
        at = self._t if t is None else float(t)
        pose = Event(at, pos, cov6, kind=POSE, rot=rot)
        if self._t < at <= self._t + self.config.history_length:  # further ahead: another clock's stamp
            bisect.insort(self._pending, pose)
            return True
        if at == self._t:
            self._apply(pose)
            return True
        if at < self._t and self._replay(pose, [pose]):
            return True
        self.stats.pose_stale += 1
        pose.t = self._t
        self._apply(pose)
        return False

    def _try_align(self, m: Event) -> bool:
        """``init_mode: align``: start at the newest IMU sample with the measurement's velocity."""
        if not self._start_aligned(self._align.align(m.z, 0.5 * self.config.init_window)):
            self.stats.meas_before_init += 1
            return False
        return True

    def _start_aligned(self, out: tuple[float, Sample, NavState] | ImuFault | None) -> bool:
        """Initialise from an :meth:`AlignmentWindow.align` result; count a refusal."""
        if out is None:
            return False
        if isinstance(out, ImuFault):
            self.init_fault = out
            self.stats.init_refused += 1
            return False
        t_last, s_last, state = out
        self.initialize(t_last, state)
        self._sample = s_last
        return True
