"""What the streaming filter (:class:`~velobins_ekf.runner.VelocityEkf`) queues and counts.

Its events, ordered by stamp and, at equal stamps, by kind: velocity measurements, displacement
measurements (fused at the window end against a clone, :mod:`velobins_ekf.displacement`) and
clones of the pose (:mod:`velobins_ekf.clone`); the snapshots it re-propagates late events from;
and :class:`FilterStats`, the counters of what it did with its inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from velobins_ekf.clone import CloneSet
from velobins_ekf.ekf import NavState
from velobins_ekf.initial_state import Sample
from velobins_ekf.velocity_error import VelocityError

VELOCITY, DISPLACEMENT, CLONE, POSE = 0, 1, 2, 3
"""Event kinds, also their order at equal stamps (a clone at ``t`` follows the updates at ``t``, and a
pose set at ``t`` comes last: it replaces what they did to the pose)."""


@dataclass
class FilterStats:
    """What the wrapper did with its inputs (all counters; rejected inputs never reach the core)."""

    imu_used: int = 0
    """IMU samples accepted (propagated or buffered for alignment)."""
    imu_nonfinite: int = 0
    """IMU samples with a NaN/inf stamp or value, dropped."""
    imu_out_of_order: int = 0
    """IMU samples stamped before the previous sample (dt < 0), dropped."""
    imu_duplicate: int = 0
    """IMU samples with the previous sample's stamp (dt == 0), dropped."""
    meas_applied: int = 0
    """Velocity measurements fused (in order or late)."""
    meas_late: int = 0
    """Of those, measurements older than the state, applied by re-propagation."""
    meas_gated: int = 0
    """Measurements rejected by the χ² gate (only when gating is on)."""
    meas_nonfinite: int = 0
    """Measurements with a NaN/inf stamp, value or covariance, dropped."""
    meas_bad_covariance: int = 0
    """Measurements whose covariance is not 3x3 symmetric positive definite, dropped."""
    meas_duplicate: int = 0
    """Measurements with the stamp of one already received, dropped."""
    meas_too_old: int = 0
    """Measurements older than the stored history, dropped."""
    meas_pending_overflow: int = 0
    """Measurements ahead of the IMU stream dropped because more than ``max_pending`` waited."""
    meas_before_init: int = 0
    """Measurements received before the filter could initialise, dropped."""
    disp_applied: int = 0
    """Displacement measurements fused (in order or late)."""
    disp_late: int = 0
    """Of those, and of clones, applied by re-propagation (end stamp or clone in the past)."""
    disp_gated: int = 0
    """Displacements refused by the χ² gate or at a singular (±90° pitch) yaw frame."""
    disp_invalid: int = 0
    """Displacements dropped as non-finite, not SPD, ``t_start ≥ t_end``, duplicate, before init, or fed to a filter
    with ``velocity_error_sigma`` > 0 (clones requested of it too)."""
    disp_too_old: int = 0
    """Displacements (or their clones) older than the stored history, dropped."""
    clones_dropped: int = 0
    """Clones marginalised before use because ``max_clones`` were held."""
    imu_gaps: int = 0
    """IMU intervals longer than ``max_imu_interval`` (a gap, or stamps jumping forward): the filter held."""
    meas_in_gap: int = 0
    """Measurements (velocity, displacement) stamped inside an IMU gap, dropped (no IMU to reach them)."""
    init_refused: int = 0
    """Self-initialisations refused because the alignment window's IMU was implausible (unit, frame)."""
    initialisations: int = 0
    """Times the filter (re)started from a state: explicitly, by alignment, or by set_pose before one."""
    pose_sets: int = 0
    """Poses set on a running filter (:meth:`~velobins_ekf.runner.VelocityEkf.set_pose`)."""
    pose_stale: int = 0
    """Of those, poses stamped outside the stored history (before it, or further ahead than its length): set at
    the state time instead of their stamp."""
    restarts: int = 0
    """Times the filter was put back to uninitialised (:meth:`~velobins_ekf.runner.VelocityEkf.restart`)."""


USED_COUNTERS = ("imu_used", "meas_applied", "meas_late", "disp_applied", "disp_late")
"""FilterStats counters of inputs used (a late one too)."""
EVENT_COUNTERS = ("imu_gaps", "initialisations", "pose_sets", "pose_stale", "restarts", "init_refused")
"""FilterStats counters of what happened to the filter; the others count inputs it refused (drops)."""


@dataclass(order=True)
class Event:
    """A queued measurement, clone or pose set; sorts by ``(t, kind)`` (a pose: ``z`` its position,
    ``cov`` its 6x6 covariance or None, ``rot`` its attitude)."""

    t: float
    z: np.ndarray = field(compare=False)
    cov: np.ndarray = field(compare=False)
    counted: bool = field(default=False, compare=False)
    kind: int = VELOCITY
    t_start: float = field(default=math.nan, compare=False)  # displacement: the clone's stamp
    rot: np.ndarray | None = field(default=None, compare=False)  # pose: body->world attitude


@dataclass
class Snapshot:
    """Filter state at ``t`` that late events re-propagate from (clones None when there are none, the
    velocity-measurement error None when the filter models it white)."""

    t: float
    state: NavState
    cov: np.ndarray
    sample: Sample | None
    clones: CloneSet | None = None
    velocity_error: VelocityError | None = None


def is_spd(r: np.ndarray) -> bool:
    """True when ``r`` is (numerically) symmetric positive definite."""
    if float(np.abs(r - r.T).max()) > 1e-9 * max(float(np.abs(r).max()), 1e-300):
        return False
    try:
        np.linalg.cholesky(r)
    except np.linalg.LinAlgError:
        return False
    return True
