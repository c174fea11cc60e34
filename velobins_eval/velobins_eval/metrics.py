"""Accuracy and consistency metrics of a flight (docs/design.md "Metrics", paper §IV-A).

One implementation shared by the offline evaluation and the ROS eval node. Definitions:

* **AVE** [m/s]: mean over samples of the velocity error norm ``‖v̂ − v‖``.
* **RTE** [m] over ``Δt`` (5 s): for every stamp ``t_i`` with ``t_i + Δt ≤ t_end``, the error of the
  displacement over the next ``Δt``, ``e_i = (p̂(t_i+Δt) − p̂(t_i)) − (p(t_i+Δt) − p(t_i))``, both
  trajectories in the same world frame and linearly interpolated at ``t_i + Δt``;
  ``RTE = √(mean ‖e_i‖²)``. A flight shorter than Δt uses its whole span (one pair), as TLIO does.
* **ATE** [m]: ``√(mean ‖p̂ − p‖²)`` without alignment (the filter starts from ground truth).
  :func:`ate_aligned` is the labelled variant after a yaw+translation (4-DoF) or SE(3) alignment.
* **NLL** [nats]: mean over samples *and* axes of the per-axis Gaussian negative log-likelihood
  ``½ log(2π σ²) + ½ e²/σ²`` (only the variances, i.e. the diagonal, are used).
* **NEES**: ``eᵀ Σ⁻¹ e`` per update (3 dof for velocity); summarised by its median (ideal
  ``χ²₃`` median 2.366) and the share inside the two-sided 95 % ``χ²₃`` bounds [0.216, 9.348].
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from velobins_common.interp import interp_columns

# The NLL, NEES and χ² bounds are defined once, in velobins_common.stats; they are part of this
# module's API (metrics.gaussian_nll, metrics.nees, metrics.NEES_BOUNDS, ...) as before.
from velobins_common.stats import (  # noqa: F401
    NEES_BOUNDS,
    NEES_CONFIDENCE,
    NEES_DOF,
    NEES_IDEAL_MEDIAN,
    chi2_bounds,
    gaussian_nll,
    nees,
)

RTE_DELTA = 5.0
"""Default RTE horizon Δt [s] (paper §IV-A)."""


def _as(name: str, a: np.ndarray, shape_tail: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 1 + len(shape_tail) or arr.shape[1:] != shape_tail:
        raise ValueError(f"metrics: '{name}' must have shape (N, {', '.join(map(str, shape_tail))}), got {arr.shape}")
    return arr


def _same_length(**arrays: np.ndarray) -> int:
    lengths = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"metrics: arrays must have the same length, got {lengths}")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError(f"metrics: empty input ({', '.join(lengths)})")
    return n


# ---------------------------------------------------------------------------------- accuracy
def ave(v_est: np.ndarray, v_gt: np.ndarray) -> float:
    """Mean velocity error norm [m/s] of (N, 3) estimates against (N, 3) ground truth."""
    v_est, v_gt = _as("v_est", v_est, (3,)), _as("v_gt", v_gt, (3,))
    _same_length(v_est=v_est, v_gt=v_gt)
    return float(np.linalg.norm(v_est - v_gt, axis=1).mean())


def rte(t: np.ndarray, p_est: np.ndarray, p_gt: np.ndarray, delta: float = RTE_DELTA) -> float:
    """RMS relative position error [m] over ``delta`` seconds (module docstring)."""
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    p_est, p_gt = _as("p_est", p_est, (3,)), _as("p_gt", p_gt, (3,))
    n = _same_length(t=t, p_est=p_est, p_gt=p_gt)
    if n < 2 or np.any(np.diff(t) <= 0):
        raise ValueError("metrics.rte: 't' must hold at least 2 strictly increasing stamps")
    if delta <= 0:
        raise ValueError(f"metrics.rte: 'delta' must be > 0, got {delta}")
    if t[-1] - t[0] < delta:
        err = (p_est[-1] - p_est[0]) - (p_gt[-1] - p_gt[0])
        return float(np.linalg.norm(err))
    starts = t[t + delta <= t[-1] + 1e-9]
    ends = np.minimum(starts + delta, t[-1])
    k = starts.size
    d_est = interp_columns(ends, t, p_est) - p_est[:k]
    d_gt = interp_columns(ends, t, p_gt) - p_gt[:k]
    return float(np.sqrt(np.mean(np.sum((d_est - d_gt) ** 2, axis=1))))


def ate(p_est: np.ndarray, p_gt: np.ndarray) -> float:
    """RMS absolute position error [m], no alignment (the filter starts from ground truth)."""
    p_est, p_gt = _as("p_est", p_est, (3,)), _as("p_gt", p_gt, (3,))
    _same_length(p_est=p_est, p_gt=p_gt)
    return float(np.sqrt(np.mean(np.sum((p_est - p_gt) ** 2, axis=1))))


def align_trajectory(
    p_est: np.ndarray, p_gt: np.ndarray, mode: Literal["yaw", "se3"] = "yaw"
) -> tuple[np.ndarray, np.ndarray]:
    """Rotation R and translation t minimising ``Σ ‖R p̂ + t − p‖²`` (no scale).

    ``"yaw"``: rotation about world z only (4-DoF, what gravity leaves unobservable in IO);
    ``"se3"``: full rotation (Umeyama / Kabsch with reflection guard).
    """
    p_est, p_gt = _as("p_est", p_est, (3,)), _as("p_gt", p_gt, (3,))
    _same_length(p_est=p_est, p_gt=p_gt)
    me, mg = p_est.mean(axis=0), p_gt.mean(axis=0)
    a, b = p_est - me, p_gt - mg
    if mode == "yaw":
        s = float(np.sum(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]))
        c = float(np.sum(a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1]))
        yaw = math.atan2(s, c)
        rot = np.array([[math.cos(yaw), -math.sin(yaw), 0.0], [math.sin(yaw), math.cos(yaw), 0.0], [0.0, 0.0, 1.0]])
    elif mode == "se3":
        u, _, vt = np.linalg.svd(b.T @ a)
        d = np.sign(np.linalg.det(u @ vt)) or 1.0
        rot = u @ np.diag([1.0, 1.0, d]) @ vt
    else:
        raise ValueError(f"metrics.align_trajectory: mode must be 'yaw' or 'se3', got {mode!r}")
    return rot, mg - rot @ me


def ate_aligned(p_est: np.ndarray, p_gt: np.ndarray, mode: Literal["yaw", "se3"] = "yaw") -> float:
    """ATE [m] after the best ``mode`` alignment (:func:`align_trajectory`); label it as aligned."""
    rot, trans = align_trajectory(p_est, p_gt, mode)
    return ate(np.asarray(p_est) @ rot.T + trans, p_gt)


# ---------------------------------------------------------------------------------- uncertainty
@dataclass(frozen=True)
class NeesSummary:
    """Consistency of a NEES series (3 dof unless stated)."""

    median: float
    """Median NEES (ideal 2.366 for 3 dof)."""
    in_bounds: float
    """Share of samples inside the two-sided 95 % χ² bounds (ideal 0.95)."""
    mean: float
    """Mean NEES (ideal = dof)."""
    count: int
    lower: float
    upper: float


def nees_summary(values: np.ndarray, dof: int = NEES_DOF) -> NeesSummary:
    """Median, in-bounds share and mean of a NEES series (non-finite entries are an error)."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("metrics.nees_summary: need a non-empty, finite NEES series")
    lo, hi = chi2_bounds(dof, NEES_CONFIDENCE)
    inside = float(np.mean((x >= lo) & (x <= hi)))
    return NeesSummary(float(np.median(x)), inside, float(x.mean()), int(x.size), lo, hi)


# ---------------------------------------------------------------------------------- ground truth
@dataclass(frozen=True)
class GroundTruthAt:
    """Ground truth interpolated to query stamps."""

    t: np.ndarray
    p: np.ndarray
    """(N, 3) world position [m] (linear interpolation)."""
    q: np.ndarray
    """(N, 4) body->world quaternion (x, y, z, w) (slerp)."""
    v: np.ndarray
    """(N, 3) world velocity [m/s] (linear interpolation)."""

    @property
    def body_velocity(self) -> np.ndarray:
        """(N, 3) body velocity ``Rᵀ v`` [m/s]."""
        return Rotation.from_quat(self.q).inv().apply(self.v)


def interpolate_ground_truth(
    t_gt: np.ndarray, p: np.ndarray, q: np.ndarray, v: np.ndarray, t_query: np.ndarray
) -> GroundTruthAt:
    """Ground truth (``Flight`` fields t, p, q, v) at arbitrary stamps inside its time range."""
    t_gt = np.asarray(t_gt, dtype=np.float64).reshape(-1)
    tq = np.asarray(t_query, dtype=np.float64).reshape(-1)
    p, v, q = _as("p", p, (3,)), _as("v", v, (3,)), _as("q", q, (4,))
    _same_length(t=t_gt, p=p, q=q, v=v)
    outside = (tq < t_gt[0] - 1e-9) | (tq > t_gt[-1] + 1e-9)
    if np.any(outside):
        bad = tq[outside][0]
        raise ValueError(f"metrics: query stamp {bad:.6f} outside ground truth [{t_gt[0]:.6f}, {t_gt[-1]:.6f}]")
    tq_c = np.clip(tq, t_gt[0], t_gt[-1])
    pi = interp_columns(tq_c, t_gt, p)
    vi = interp_columns(tq_c, t_gt, v)
    qi = Slerp(t_gt, Rotation.from_quat(q))(tq_c).as_quat()
    return GroundTruthAt(t=tq, p=pi, q=qi, v=vi)


# ---------------------------------------------------------------------------------- per flight
@dataclass(frozen=True)
class FlightMetrics:
    """The paper's per-flight figures (units in the field docs)."""

    net_ave: float
    """Network AVE [m/s] (body frame, before fusion)."""
    net_nll: float
    """Network per-axis Gaussian NLL [nats]."""
    ave: float
    """EKF-fused AVE [m/s] (world frame)."""
    rte: float
    """EKF-fused RTE over 5 s [m]."""
    ate: float
    """EKF-fused ATE [m], no alignment."""
    nees_median: float
    """Median per-update NEES of the fused velocity (3 dof; ideal 2.366)."""
    nees_in_bounds: float
    """Share of updates whose NEES is inside [0.216, 9.348] (ideal 0.95)."""

    def as_dict(self) -> dict[str, float]:
        """Plain dict with the keys above, for reports."""
        return asdict(self)


def flight_metrics(
    gt: GroundTruthAt,
    v_net_body: np.ndarray,
    var_net_body: np.ndarray,
    p_fused: np.ndarray,
    v_fused_world: np.ndarray,
    v_fused_cov_world: np.ndarray,
    rte_delta: float = RTE_DELTA,
) -> FlightMetrics:
    """All figures of one flight from arrays sampled at the same stamps ``gt.t`` (the updates).

    Args:
        gt: ground truth at the update stamps (:func:`interpolate_ground_truth`).
        v_net_body, var_net_body: (N, 3) network velocity [m/s] and variances (or (N, 3, 3)), body frame;
            all NaN for a method whose network gives no body velocity (TLIO, EqNIO, IMO: displacements),
            whose net columns are then NaN.
        p_fused, v_fused_world: (N, 3) fused position [m] and world velocity [m/s] after each update.
        v_fused_cov_world: (N, 3, 3) covariance of the fused world velocity (NEES).
    """
    gt_vb = gt.body_velocity
    summary = nees_summary(nees(np.asarray(v_fused_world) - gt.v, v_fused_cov_world))
    no_net = bool(np.isnan(np.asarray(v_net_body, dtype=np.float64)).all())
    return FlightMetrics(
        net_ave=math.nan if no_net else ave(v_net_body, gt_vb),
        net_nll=math.nan if no_net else gaussian_nll(v_net_body, var_net_body, gt_vb),
        ave=ave(v_fused_world, gt.v),
        rte=rte(gt.t, p_fused, gt.p, rte_delta),
        ate=ate(p_fused, gt.p),
        nees_median=summary.median,
        nees_in_bounds=summary.in_bounds,
    )
