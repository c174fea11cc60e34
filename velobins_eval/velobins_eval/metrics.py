"""Accuracy and consistency metrics of a flight (docs/metrics.md, paper §IV-A).

One implementation shared by the offline evaluation, the ROS eval node and ``velobins score``.
Every metric is sampled at the estimate's stamps (for the filter: its velocity-update stamps, the
first one a full network window after the start), ground truth interpolated there. Definitions
(docs/metrics.md states them with the choices the paper leaves open):

* **AVE** [m/s]: mean over samples of the velocity error norm ``‖v̂ − v‖`` (world frame for the
  fused velocity, body frame for the network's).
* **Body AVE** [m/s]: the same for the fused velocity in the body frame, ``‖R̂ᵀv̂ − Rᵀv‖``: a heading
  drift turns the world-frame velocity and enlarges the AVE, not this one.
* **RTE** [m] over ``Δt`` (5 s): for every stamp ``t_i`` with ``t_i + Δt ≤ t_end``, the error of the
  displacement over the next ``Δt``, ``e_i = (p̂(t_i+Δt) − p̂(t_i)) − (p(t_i+Δt) − p(t_i))``, both
  trajectories in the same world frame and linearly interpolated at ``t_i + Δt``;
  ``RTE = √(mean ‖e_i‖²)``. A flight shorter than Δt uses its whole span (one pair), as TLIO does.
* **ATE** [m]: ``√(mean ‖p̂ − p‖²)`` without alignment (the filter starts from ground truth).
  :func:`ate_aligned` is the labelled variant after a yaw+translation (4-DoF) or SE(3) alignment.
* **Rotation error** [deg]: RMS over samples of the angle of ``Rᵀ R̂``; **final yaw error** [deg]:
  ``|wrap(ψ̂ − ψ)|`` at the last sample, ψ the ZYX yaw.
* **NLL** [nats]: mean over samples *and* axes of the per-axis Gaussian negative log-likelihood
  ``½ log(2π σ²) + ½ e²/σ²`` (only the variances, i.e. the diagonal, are used).
* **NEES**: ``eᵀ Σ⁻¹ e`` per update (3 dof for velocity); summarised by its median (ideal
  ``χ²₃`` median 2.366), the share inside the two-sided 95 % ``χ²₃`` bounds [0.216, 9.348] and
  its mean (ideal 3; heavy tails show here first).
* **Fused NLL** [nats]: mean over updates of the 3-dof Gaussian NLL of the fused velocity's error under its
  covariance, ``½ (eᵀ Σ⁻¹ e + log det Σ + 3 log 2π)``: the log score ``velobins calibrate`` minimises. A proper
  scoring rule: it rewards an accurate estimate and a covariance that fits its errors together, where the AVE
  sees only the first and the NEES only the second.
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
    gaussian_nll_samples,
    nees,
)

RTE_DELTA = 5.0
"""Default RTE horizon Δt [s] (paper §IV-A)."""


def _as(name: str, a: np.ndarray, shape_tail: tuple[int, ...]) -> np.ndarray:
    # contiguous: the same numbers give the same result bit for bit whatever view they come in
    # (an SVD of a strided column block of a CSV read back can differ in the last bit)
    arr = np.ascontiguousarray(a, dtype=np.float64)
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


# ---------------------------------------------------------------------------------- orientation
def rotation_errors(q_est: np.ndarray, q_gt: np.ndarray) -> np.ndarray:
    """(N,) angle [rad] of ``Rᵀ R̂`` for (N, 4) body->world quaternions (x, y, z, w) of estimate and truth."""
    q_est, q_gt = _as("q_est", q_est, (4,)), _as("q_gt", q_gt, (4,))
    _same_length(q_est=q_est, q_gt=q_gt)
    return (Rotation.from_quat(q_gt).inv() * Rotation.from_quat(q_est)).magnitude()


def yaw_errors(q_est: np.ndarray, q_gt: np.ndarray) -> np.ndarray:
    """(N,) heading error ``wrap(ψ̂ − ψ)`` [rad] in (−π, π], ψ = ``atan2(R[1,0], R[0,0])`` (ZYX yaw)."""
    q_est, q_gt = _as("q_est", q_est, (4,)), _as("q_gt", q_gt, (4,))
    _same_length(q_est=q_est, q_gt=q_gt)
    r_est, r_gt = Rotation.from_quat(q_est).as_matrix(), Rotation.from_quat(q_gt).as_matrix()
    d = np.arctan2(r_est[:, 1, 0], r_est[:, 0, 0]) - np.arctan2(r_gt[:, 1, 0], r_gt[:, 0, 0])
    return np.angle(np.exp(1j * d))


def rotation_rms_deg(q_est: np.ndarray, q_gt: np.ndarray) -> float:
    """RMS rotation error [deg] (:func:`rotation_errors`)."""
    return float(np.degrees(np.sqrt(np.mean(rotation_errors(q_est, q_gt) ** 2))))


def final_yaw_error_deg(q_est: np.ndarray, q_gt: np.ndarray) -> float:
    """Absolute heading error [deg] at the last sample (:func:`yaw_errors`)."""
    return float(np.degrees(abs(yaw_errors(q_est[-1:], q_gt[-1:])[0])))


def body_ave(v_est_world: np.ndarray, q_est: np.ndarray, v_gt_world: np.ndarray, q_gt: np.ndarray) -> float:
    """AVE [m/s] of the velocity in each trajectory's own body frame: mean ``‖R̂ᵀv̂ − Rᵀv‖``."""
    v_est_world, v_gt_world = _as("v_est", v_est_world, (3,)), _as("v_gt", v_gt_world, (3,))
    est = Rotation.from_quat(_as("q_est", q_est, (4,))).inv().apply(v_est_world)
    gt = Rotation.from_quat(_as("q_gt", q_gt, (4,))).inv().apply(v_gt_world)
    return ave(est, gt)


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
    """The per-flight figures: the paper's seven, then the labelled additions (units in the field docs).

    A figure the estimate has no input for (no network velocity, no covariance, no orientation) is NaN.
    """

    net_ave: float
    """Network AVE [m/s] (body frame, before fusion)."""
    net_nll: float
    """Network per-axis Gaussian NLL [nats]."""
    ave: float
    """EKF-fused AVE [m/s] (world frame)."""
    rte: float
    """EKF-fused RTE over 5 s [m] (world-frame displacements)."""
    ate: float
    """EKF-fused ATE [m], no alignment (the paper's)."""
    nees_median: float
    """Median per-update NEES of the fused velocity (3 dof; ideal 2.366)."""
    nees_in_bounds: float
    """Share of updates whose NEES is inside [0.216, 9.348] (ideal 0.95)."""
    ate_yaw: float = math.nan
    """ATE [m] after the best yaw + translation (4-DoF) alignment."""
    ate_se3: float = math.nan
    """ATE [m] after the best rotation + translation (SE(3)) alignment."""
    rot_rms: float = math.nan
    """RMS rotation error [deg] of the fused attitude."""
    yaw_final: float = math.nan
    """Absolute heading (yaw) error [deg] at the last update."""
    ave_body: float = math.nan
    """EKF-fused AVE [m/s] in the body frame (free of the heading drift that the world-frame AVE carries)."""
    nees_mean: float = math.nan
    """Mean per-update NEES of the fused velocity (ideal 3)."""
    fused_nll: float = math.nan
    """Mean per-update Gaussian NLL [nats] of the fused velocity under its covariance (lower is better)."""

    def as_dict(self) -> dict[str, float]:
        """Plain dict with the keys above, for reports."""
        return asdict(self)


PAPER_KEYS = ("net_ave", "net_nll", "ave", "rte", "ate", "nees_median", "nees_in_bounds")
"""The paper's seven figures (the columns of every earlier report, in order)."""
EXTRA_KEYS = ("ate_yaw", "ate_se3", "rot_rms", "yaw_final", "ave_body", "nees_mean", "fused_nll")
"""The labelled additions: aligned ATEs, orientation, body-frame velocity error, NEES mean, fused NLL."""


def _finite(*arrays: np.ndarray | None) -> bool:
    return all(a is not None and bool(np.all(np.isfinite(np.asarray(a, dtype=np.float64)))) for a in arrays)


def flight_metrics(
    gt: GroundTruthAt,
    v_net_body: np.ndarray,
    var_net_body: np.ndarray,
    p_fused: np.ndarray,
    v_fused_world: np.ndarray,
    v_fused_cov_world: np.ndarray,
    rte_delta: float = RTE_DELTA,
    q_fused: np.ndarray | None = None,
) -> FlightMetrics:
    """All figures of one flight from arrays sampled at the same stamps ``gt.t`` (the updates).

    Args:
        gt: ground truth at the update stamps (:func:`interpolate_ground_truth`).
        v_net_body, var_net_body: (N, 3) network velocity [m/s] and variances (or (N, 3, 3)), body frame;
            all NaN for a method whose network gives no body velocity (TLIO, EqNIO, IMO: displacements;
            IMU-only; a scored trajectory), whose net columns are then NaN.
        p_fused: (N, 3) fused position [m] after each update (must be finite).
        v_fused_world: (N, 3) fused world velocity [m/s] (NaN: no velocity columns).
        v_fused_cov_world: (N, 3, 3) covariance of the fused world velocity (NaN: no NEES columns).
        q_fused: (N, 4) fused body->world quaternion (x, y, z, w); None or NaN: no orientation columns.
    """
    p_fused = _as("p_fused", p_fused, (3,))
    if not _finite(p_fused):
        raise ValueError("metrics.flight_metrics: 'p_fused' must be finite")
    nan = math.nan
    has_net = _finite(v_net_body, var_net_body)
    has_vel = _finite(v_fused_world)
    has_cov = has_vel and _finite(v_fused_cov_world)
    has_rot = q_fused is not None and _finite(q_fused)
    err = np.asarray(v_fused_world, dtype=np.float64) - gt.v
    summary = nees_summary(nees(err, v_fused_cov_world)) if has_cov else None
    gt_vb = gt.body_velocity if has_net else None
    return FlightMetrics(
        net_ave=ave(v_net_body, gt_vb) if has_net else nan,
        net_nll=gaussian_nll(v_net_body, var_net_body, gt_vb) if has_net else nan,
        ave=ave(v_fused_world, gt.v) if has_vel else nan,
        rte=rte(gt.t, p_fused, gt.p, rte_delta),
        ate=ate(p_fused, gt.p),
        nees_median=summary.median if summary else nan,
        nees_in_bounds=summary.in_bounds if summary else nan,
        ate_yaw=ate_aligned(p_fused, gt.p, "yaw"),
        ate_se3=ate_aligned(p_fused, gt.p, "se3"),
        rot_rms=rotation_rms_deg(q_fused, gt.q) if has_rot else nan,
        yaw_final=final_yaw_error_deg(q_fused, gt.q) if has_rot else nan,
        ave_body=body_ave(v_fused_world, q_fused, gt.v, gt.q) if has_vel and has_rot else nan,
        nees_mean=summary.mean if summary else nan,
        fused_nll=float(np.mean(gaussian_nll_samples(err, v_fused_cov_world))) if has_cov else nan,
    )
