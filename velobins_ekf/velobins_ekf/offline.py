"""Run the streaming filter over recorded arrays (offline evaluation, tests, benchmark).

The IMU and measurement streams are merged by stamp and fed to :class:`VelocityEkf` exactly as
the ROS node would feed them, so offline numbers are the numbers the node produces.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.displacement import DisplacementResult
from velobins_ekf.ekf import NavState, UpdateResult
from velobins_ekf.runner import FilterStats, VelocityEkf


@dataclass
class OfflineResult:
    """Filter output at (a stride of) the IMU stamps, plus the per-update records."""

    t: np.ndarray
    """(M,) stamps [s] of the rows below."""
    pos: np.ndarray
    """(M, 3) world position [m]."""
    rot: np.ndarray
    """(M, 3, 3) body->world rotation."""
    vel: np.ndarray
    """(M, 3) world velocity [m/s]."""
    cov_diag: np.ndarray | None
    """(M, 15) diagonal of the error-state covariance (``record_covariance`` only, else None)."""
    updates: list[UpdateResult]
    """Per-update diagnostics (empty when ``keep_updates`` was False)."""
    stats: FilterStats
    final_state: NavState
    """State after the last sample."""
    final_cov: np.ndarray
    """15x15 covariance after the last sample."""
    min_eigenvalue: float = float("nan")
    """Smallest eigenvalue of P over the recorded rows (``check_covariance`` only)."""
    max_asymmetry: float = float("nan")
    """Largest ``|P − Pᵀ|`` entry over the recorded rows (``check_covariance`` only)."""
    displacement_updates: list[DisplacementResult] = field(default_factory=list)
    """Per-displacement-update diagnostics (empty without displacements or ``keep_updates``)."""


def _displacement_events(displacements) -> list[tuple[float, int, tuple]]:
    """``(t_start, t_end, dz, cov)`` arrays -> the events to feed, by stamp: a clone request at
    each distinct ``t_start`` (so no clone needs re-propagation) and each displacement at ``t_end``."""
    t_start, t_end, dz, cov = (np.asarray(a, dtype=np.float64) for a in displacements)
    if cov.ndim == 2:
        cov = np.einsum("mi,ij->mij", cov, np.eye(3))
    n = t_start.size
    if t_end.shape != (n,) or dz.shape != (n, 3) or cov.shape != (n, 3, 3):
        raise ValueError(
            f"run_offline: displacements must be (M,), (M,), (M, 3), (M, 3, 3) or (M, 3); got "
            f"{t_start.shape}, {t_end.shape}, {dz.shape}, {cov.shape}"
        )
    clones = [(float(t), 0, (float(t),)) for t in np.unique(t_start)]
    meas = [(float(t_end[m]), 1, (float(t_start[m]), float(t_end[m]), dz[m], cov[m])) for m in range(n)]
    return sorted(clones + meas, key=lambda e: (e[0], e[1]))


def run_offline(
    t_imu: np.ndarray,
    acc: np.ndarray,
    gyro: np.ndarray,
    t_meas: np.ndarray,
    z_meas: np.ndarray,
    cov_meas: np.ndarray,
    init_state: NavState | None = None,
    init_cov: np.ndarray | None = None,
    config: EkfConfig | None = None,
    output_stride: int = 1,
    keep_updates: bool = True,
    check_covariance: bool = False,
    record_covariance: bool = False,
    displacements: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    on_imu: Callable[[int, VelocityEkf], None] | None = None,
) -> OfflineResult:
    """Filter a whole flight.

    Args:
        t_imu, acc, gyro: (T,), (T, 3), (T, 3) IMU stream (stamps [s], body frame, SI).
        t_meas, z_meas, cov_meas: (M,), (M, 3), (M, 3, 3) or (M, 3) (variances) velocity stream.
        init_state: state at ``t_imu[0]`` (e.g. ground truth); omitted → gravity alignment.
        init_cov: 15x15 initial covariance; omitted → from the config's initial sigmas.
        config: filter configuration.
        output_stride: record the state every this many IMU samples.
        keep_updates: keep the per-update records (memory: ~1 kB each).
        check_covariance: track P's smallest eigenvalue and asymmetry at the recorded rows.
        record_covariance: record P's diagonal at the recorded rows. Off by default: reading P
            at every IMU sample makes the filter step the covariance one interval at a time
            (several times slower than the blocks it takes between updates, see
            :class:`~velobins_ekf.ekf.ErrorStateEkf`).
        displacements: ``(t_start, t_end, dz, cov)``, (D,), (D,), (D, 3), (D, 3, 3) or (D, 3): the
            displacement stream of TLIO-style methods (frame: ``config.displacement_yaw_frame``),
            fused with clones (:meth:`VelocityEkf.add_displacement`); see
            :func:`run_offline_displacement`.
        on_imu: called as ``on_imu(i, filter)`` right after IMU sample ``i`` is fed: a closed loop
            (methods whose network reads the filter's attitude) feeds its measurements from there.
    """
    t_imu = np.asarray(t_imu, dtype=np.float64)
    acc = np.asarray(acc, dtype=np.float64)
    gyro = np.asarray(gyro, dtype=np.float64)
    t_meas = np.asarray(t_meas, dtype=np.float64)
    z_meas = np.asarray(z_meas, dtype=np.float64)
    cov_meas = np.asarray(cov_meas, dtype=np.float64)
    if cov_meas.ndim == 2:
        cov_meas = np.einsum("mi,ij->mij", cov_meas, np.eye(3))
    if acc.shape != (t_imu.size, 3) or gyro.shape != (t_imu.size, 3):
        raise ValueError(f"run_offline: acc/gyro must be ({t_imu.size}, 3), got {acc.shape} and {gyro.shape}")
    if z_meas.shape != (t_meas.size, 3) or cov_meas.shape != (t_meas.size, 3, 3):
        raise ValueError(
            f"run_offline: z_meas/cov_meas must match t_meas ({t_meas.size}), got {z_meas.shape}, {cov_meas.shape}"
        )

    filt = VelocityEkf(config, keep_updates=keep_updates)
    min_eig = math.inf
    max_asym = 0.0
    if init_state is not None:
        filt.initialize(float(t_imu[0]), init_state, init_cov)
    n_out = (t_imu.size + output_stride - 1) // output_stride
    out_t = np.empty(n_out)
    out_p = np.empty((n_out, 3))
    out_r = np.empty((n_out, 3, 3))
    out_v = np.empty((n_out, 3))
    out_c = np.empty((n_out, 15)) if record_covariance else None
    filt.record_poses(out_p, out_r, out_v)
    order = np.argsort(t_meas, kind="stable")
    events = _displacement_events(displacements) if displacements is not None else []
    d = 0
    j = 0
    k = 0
    acc_l = acc.tolist()
    gyro_l = gyro.tolist()
    t_l = t_imu.tolist()
    for i, ti in enumerate(t_l):
        while j < order.size and t_meas[order[j]] <= ti:
            m = order[j]
            filt.add_velocity(float(t_meas[m]), z_meas[m], cov_meas[m])
            j += 1
        while d < len(events) and events[d][0] <= ti:
            _feed(filt, events[d])
            d += 1
        filt.add_imu(ti, acc_l[i], gyro_l[i])
        if on_imu is not None:
            on_imu(i, filt)
        if i % output_stride == 0:
            out_t[k] = ti
            filt.mark_pose(k)
            if out_c is not None:
                out_c[k] = np.diagonal(filt.covariance)
            k += 1
            if check_covariance:
                cov = filt.covariance
                max_asym = max(max_asym, float(np.abs(cov - cov.T).max()))
                min_eig = min(min_eig, float(np.linalg.eigvalsh(cov)[0]))
    while j < order.size:
        m = order[j]
        filt.add_velocity(float(t_meas[m]), z_meas[m], cov_meas[m])
        j += 1
    for event in events[d:]:
        _feed(filt, event)
    final_state = filt.state  # reading the state also writes the rows still marked
    return OfflineResult(
        t=out_t,
        pos=out_p,
        rot=out_r,
        vel=out_v,
        cov_diag=out_c,
        updates=filt.updates,
        stats=filt.stats,
        final_state=final_state,
        final_cov=filt.covariance,
        min_eigenvalue=min_eig if check_covariance else float("nan"),
        max_asymmetry=max_asym if check_covariance else float("nan"),
        displacement_updates=filt.displacement_updates,
    )


def _feed(filt: VelocityEkf, event: tuple[float, int, tuple]) -> None:
    """Give the filter one event of :func:`_displacement_events`."""
    if event[1] == 0:
        filt.request_clone(*event[2])
    else:
        filt.add_displacement(*event[2])


def run_offline_displacement(
    t_imu: np.ndarray,
    acc: np.ndarray,
    gyro: np.ndarray,
    t_start: np.ndarray,
    t_end: np.ndarray,
    dz: np.ndarray,
    cov: np.ndarray,
    **kwargs,
) -> OfflineResult:
    """Filter a whole flight with a displacement method (TLIO, EqNIO, IMO): IMU + displacements
    ``dz`` (D, 3) [m] over ``[t_start, t_end]`` with covariances ``cov`` (D, 3, 3) or variances
    (D, 3) [m²], and no velocity stream. ``kwargs`` are :func:`run_offline`'s."""
    none = np.zeros((0, 3))
    return run_offline(t_imu, acc, gyro, none[:, 0], none, none, displacements=(t_start, t_end, dz, cov), **kwargs)
