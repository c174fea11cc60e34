"""Scoring flights: what a method produced on a flight, its ground truth, and the paper metrics of both.

The one place a :class:`FlightRecord` becomes numbers (paper §IV-A, metrics of
:mod:`velobins_eval.metrics`), shared by every producer of records and every report:

* producers: :mod:`velobins_eval.evaluate` (offline: network and EKF-fused), the eval node (a
  recorded ROS graph run), the demo and ``velobins reproduce``;
* consumers: :mod:`velobins_eval.report` (``metrics.json`` / ``metrics.md``) and
  :mod:`velobins_eval.reproduce` (the paper's tables).

:func:`score` gives one flight's :class:`~velobins_eval.metrics.FlightMetrics`; :func:`aggregate`
averages them over flights (the ``aggregate`` of every report), keyed by :data:`ALL_KEYS`: the paper's
:data:`KEYS` then the labelled additions (aligned ATEs, orientation, body-frame AVE, NEES mean, fused NLL).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from velobins_data.flight import Flight

from . import metrics

KEYS = metrics.PAPER_KEYS
"""The paper's metric names, in column order (``net_ave, net_nll, ave, rte, ate, nees_median, nees_in_bounds``)."""
EXTRA_KEYS = metrics.EXTRA_KEYS
"""The labelled additions (``ate_yaw, ate_se3, rot_rms, yaw_final, ave_body, nees_mean, fused_nll``)."""
ALL_KEYS = KEYS + EXTRA_KEYS
"""Every field of :class:`~velobins_eval.metrics.FlightMetrics`: the keys of ``metrics.json``."""


@dataclass
class FlightRecord:
    """What one method produced on one flight, sampled at its velocity-update stamps.

    Attributes:
        flight: flight name.
        method: method label (variant name, ``imu-only``).
        t: (U,) update stamps [s].
        v_net, var_net: (U, 3) network body velocity [m/s] and variances [m²/s²] (NaN for imu-only).
        p_fused: (U, 3) fused world position right after each update [m].
        v_fused: (U, 3) fused world velocity right after each update [m/s] (NaN: a trajectory without one).
        cov_fused: (U, 3, 3) covariance of ``v_fused`` (NaN for imu-only).
        t_traj, p_traj: the fused trajectory at full rate, for plots and recordings.
        q_fused: (U, 4) fused body->world quaternion (x, y, z, w) right after each update (None: unknown).
        q_traj, v_traj: (T, 4) orientation and (T, 3) world velocity of the full-rate trajectory (None: unknown).
    """

    flight: str
    method: str
    t: np.ndarray
    v_net: np.ndarray
    var_net: np.ndarray
    p_fused: np.ndarray
    v_fused: np.ndarray
    cov_fused: np.ndarray
    t_traj: np.ndarray
    p_traj: np.ndarray
    q_fused: np.ndarray | None = None
    q_traj: np.ndarray | None = None
    v_traj: np.ndarray | None = None


@dataclass
class GroundTruth:
    """Ground-truth stream (``Flight`` fields) of a flight; from a Flight or recorded from a topic."""

    t: np.ndarray
    p: np.ndarray
    q: np.ndarray
    v: np.ndarray

    @classmethod
    def of(cls, seq: Flight) -> GroundTruth:
        """The ground truth of a loaded flight."""
        return cls(seq.t, seq.p, seq.q, seq.v)

    def at(self, t: np.ndarray) -> metrics.GroundTruthAt:
        """Ground truth interpolated at the stamps ``t``."""
        return metrics.interpolate_ground_truth(self.t, self.p, self.q, self.v, t)


def score(record: FlightRecord, gt: GroundTruth) -> metrics.FlightMetrics:
    """Every metric of one record against ground truth (NaN where a method has no such output)."""
    return metrics.flight_metrics(
        gt.at(record.t),
        record.v_net,
        record.var_net,
        record.p_fused,
        record.v_fused,
        record.cov_fused,
        q_fused=record.q_fused,
    )


def nees_series(record: FlightRecord, at: metrics.GroundTruthAt) -> np.ndarray:
    """(U,) per-update NEES of the fused velocity against ground truth ``at`` its stamps (NaN without a covariance)."""
    if not (np.all(np.isfinite(record.cov_fused)) and np.all(np.isfinite(record.v_fused))):
        return np.full(record.t.size, np.nan)
    return metrics.nees(record.v_fused - at.v, record.cov_fused)


def nanmean(values: Iterable[float]) -> float:
    """Mean of the finite values; NaN when there is none (a metric no flight has)."""
    arr = np.asarray(list(values), dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else math.nan


def aggregate(per_flight: dict[str, metrics.FlightMetrics]) -> dict[str, float]:
    """Mean over flights of each metric (NaN-aware; NaN when no flight has it)."""
    return {key: nanmean(getattr(m, key) for m in per_flight.values()) for key in ALL_KEYS}
