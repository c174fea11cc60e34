"""Vectorised propagation of the error-state EKF over a block of IMU intervals.

The filter's measurements arrive at 10–50 Hz while the IMU runs at 0.2–1 kHz, and nothing between
two updates needs the covariance. :class:`~velobins_ekf.ekf.ErrorStateEkf` therefore queues the
IMU intervals and hands whole blocks to the functions here, which do with a few batched numpy
calls what the per-sample path does with dozens of scalar ones:

* :func:`propagate_nominal` integrates the nominal state over ``n`` intervals (the same scheme as
  the per-sample path, see :mod:`velobins_ekf.ekf`; the rotation chain is a log-depth prefix
  product) and returns each interval's linearisation point;
* :func:`transition_and_noise` builds every interval's ``F`` (15x15) and ``Q`` from those points;
* :func:`compose` folds ``(F_k, Q_k)`` pairwise in a log-depth tree into one ``(Φ, Q_Σ)`` with
  ``P_n = Φ P_0 Φᵀ + Q_Σ`` — the same covariance as ``n`` sequential ``P ← F P Fᵀ + Q`` steps
  up to round-off (tested against them).

A linearisation row holds ``(dt, R_m (9, row-major), ā (3), h (3))``: interval length [s],
mid-interval attitude, bias-corrected specific force [m/s²] and the half rotation increment
``h = (ω − b_g) dt / 2`` [rad]; the biases are constant over a block (they change only in updates).
"""

from __future__ import annotations

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.so3 import SMALL_ANGLE

LIN_WIDTH = 16
"""Floats per linearisation row: dt, R_m (9), ā (3), h (3)."""

_DIAG3 = (np.arange(3), np.arange(3))
_DIAG15 = (np.arange(15), np.arange(15))


def white_noise_variance(density, dt):
    """Per-sample variance ``σ²/dt`` of white noise of density σ [unit/√Hz] held over ``dt`` [s]
    (a sampled, zero-order-held IMU); floats or arrays."""
    return density * density / dt


def random_walk_variance(random_walk, dt):
    """Increment variance ``σ_b² dt`` over ``dt`` [s] of a bias random walk σ_b [unit/s/√Hz]."""
    return random_walk * random_walk * dt


def exp_coefficients_batch(theta2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :func:`velobins_ekf.so3.exp_coefficients`: ``(sin t/t, (1−cos t)/t², (t−sin t)/t³)``
    for ``t² = theta2`` (n,), with the same Taylor series below :data:`~velobins_ekf.so3.SMALL_ANGLE`."""
    small = theta2 < SMALL_ANGLE * SMALL_ANGLE
    t2 = np.where(small, 1.0, theta2)
    t = np.sqrt(t2)
    s = np.sin(t)
    a = np.where(small, 1.0 - theta2 / 6.0, s / t)
    b = np.where(small, 0.5 - theta2 / 24.0, (1.0 - np.cos(t)) / t2)
    c = np.where(small, 1.0 / 6.0 - theta2 / 120.0, (t - s) / (t2 * t))
    return a, b, c


def _skew(v: np.ndarray) -> np.ndarray:
    """``[v]×`` (n, 3, 3) of (n, 3) vectors."""
    k = np.zeros((v.shape[0], 3, 3))
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    k[:, 0, 1], k[:, 0, 2], k[:, 1, 2] = -z, y, -x
    k[:, 1, 0], k[:, 2, 0], k[:, 2, 1] = z, -y, x
    return k


def _skew_and_square(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``K = [v]×`` and ``K² = v vᵀ − |v|² I`` for (n, 3) vectors, and ``|v|²`` (n,)."""
    k = _skew(v)
    t2 = np.einsum("ni,ni->n", v, v)
    k2 = v[:, :, None] * v[:, None, :]
    k2[:, _DIAG3[0], _DIAG3[1]] -= t2[:, None]
    return k, k2, t2


def _so3_poly(c1: np.ndarray, k: np.ndarray, c2: np.ndarray, k2: np.ndarray) -> np.ndarray:
    """``I + c1 K + c2 K²`` for (n,) coefficients and (n, 3, 3) ``K``, ``K²``."""
    out = c1[:, None, None] * k + c2[:, None, None] * k2
    out[:, _DIAG3[0], _DIAG3[1]] += 1.0
    return out


def prefix_products(m: np.ndarray) -> np.ndarray:
    """Inclusive prefix products ``s_k = m_0 m_1 ⋯ m_k`` of (n, d, d) matrices (Hillis–Steele scan:
    ⌈log₂ n⌉ batched matmuls instead of n small ones)."""
    s = m.copy()
    off = 1
    n = s.shape[0]
    while off < n:
        s[off:] = s[:-off] @ s[off:]  # the right side is evaluated before the assignment
        off *= 2
    return s


def propagate_nominal(
    rot: np.ndarray,
    vel: np.ndarray,
    pos: np.ndarray,
    acc_bias: np.ndarray,
    gyro_bias: np.ndarray,
    gravity: float,
    samples: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Integrate the nominal state over ``n`` intervals.

    Args:
        rot, vel, pos, acc_bias, gyro_bias: the state at the block's start (not modified).
        gravity: gravity magnitude g [m/s²] (world gravity ``(0, 0, −g)``).
        samples: (n, 7) rows ``(dt, f_x, f_y, f_z, ω_x, ω_y, ω_z)``, the intervals' mean specific
            force [m/s²] and rate [rad/s].

    Returns:
        ``(rot, vel, pos, lin)``: the state after the block and the (n, 16) linearisation rows.
    """
    n = samples.shape[0]
    dt = samples[:, 0]
    hd = 0.5 * dt
    acc = samples[:, 1:4] - acc_bias
    h = (samples[:, 4:7] - gyro_bias) * hd[:, None]
    k, k2, t2 = _skew_and_square(h)
    a, b, _ = exp_coefficients_batch(t2)
    e_half = _so3_poly(a, k, b, k2)  # Exp(φ/2)
    chain = prefix_products(e_half @ e_half)  # Exp(φ_0) ⋯ Exp(φ_k)
    r_start = np.empty((n, 3, 3))
    r_start[0] = rot
    np.matmul(rot, chain[:-1], out=r_start[1:])
    r_mid = r_start @ e_half
    a_world = np.einsum("nij,nj->ni", r_mid, acc)
    a_world[:, 2] -= gravity
    dv = a_world * dt[:, None]
    v_end = np.cumsum(dv, axis=0)
    v_start = np.empty((n, 3))
    v_start[0] = 0.0
    v_start[1:] = v_end[:-1]
    v_start += vel
    dp = v_start * dt[:, None] + a_world * (hd * dt)[:, None]
    lin = np.empty((n, LIN_WIDTH))
    lin[:, 0] = dt
    lin[:, 1:10] = r_mid.reshape(n, 9)
    lin[:, 10:13] = acc
    lin[:, 13:16] = h
    return rot @ chain[-1], vel + v_end[-1], pos + dp.sum(axis=0), lin


def transition_and_noise(lin: np.ndarray, config: EkfConfig) -> tuple[np.ndarray, np.ndarray]:
    """Error-state transition ``F_k`` and process noise ``Q_k``, (n, 15, 15) each, of ``n``
    linearisation rows (formulas in :mod:`velobins_ekf.ekf`; the noise densities from ``config``)."""
    n = lin.shape[0]
    dt = lin[:, 0]
    hd = 0.5 * dt
    r_mid = lin[:, 1:10].reshape(n, 3, 3)
    h = lin[:, 13:16]
    k, k2, t2 = _skew_and_square(h)
    a, b, c = exp_coefficients_batch(t2)
    af, bf, cf = exp_coefficients_batch(4.0 * t2)  # full angle φ = 2h: K_φ = 2K, K_φ² = 4K²
    f = np.zeros((n, 15, 15))
    f[:, _DIAG15[0], _DIAG15[1]] = 1.0
    f[:, 0:3, 0:3] = _so3_poly(-2.0 * af, k, 4.0 * bf, k2)  # Exp(φ)ᵀ
    f[:, 0:3, 12:15] = _so3_poly(-2.0 * bf, k, 4.0 * cf, k2) * -dt[:, None, None]  # −dt Jr(φ)
    et_jr = np.empty((n, 3, 6))
    et_jr[:, :, 0:3] = _so3_poly(-a, k, b, k2) * -dt[:, None, None]  # −dt Exp(h)ᵀ
    et_jr[:, :, 3:6] = _so3_poly(-b, k, c, k2) * (hd * dt)[:, None, None]  # ½dt² Jr(h)
    y = (r_mid @ _skew(lin[:, 10:13])) @ et_jr
    f[:, 3:6, 0:3] = y[:, :, 0:3]
    f[:, 3:6, 12:15] = y[:, :, 3:6]
    f[:, 3:6, 9:12] = r_mid * -dt[:, None, None]
    f[:, 6:9, 0:3] = y[:, :, 0:3] * hd[:, None, None]
    f[:, 6:9, 9:15] = f[:, 3:6, 9:15] * hd[:, None, None]
    f[:, 6, 3] = f[:, 7, 4] = f[:, 8, 5] = dt
    # Q = G W Gᵀ + bias random walks, G = F's bias columns, W = diag(σ_a², σ_g²)/dt
    scale = np.empty((n, 1, 6))
    inv_sqrt_dt = 1.0 / np.sqrt(dt)
    scale[:, 0, 0:3] = (config.acc_noise_density * inv_sqrt_dt)[:, None]
    scale[:, 0, 3:6] = (config.gyro_noise_density * inv_sqrt_dt)[:, None]
    gs = f[:, 0:9, 9:15] * scale
    q = np.zeros((n, 15, 15))
    np.matmul(gs, gs.transpose(0, 2, 1), out=q[:, 0:9, 0:9])
    q[:, _DIAG3[0] + 9, _DIAG3[1] + 9] = (config.acc_random_walk**2 * dt)[:, None]
    q[:, _DIAG3[0] + 12, _DIAG3[1] + 12] = (config.gyro_random_walk**2 * dt)[:, None]
    return f, q


def compose(f: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold ``n`` steps ``P ← F_k P F_kᵀ + Q_k`` into one ``(Φ, Q_Σ)`` (pairwise, log depth).

    Pairs combine as ``(F_b, Q_b) ∘ (F_a, Q_a) = (F_b F_a, F_b Q_a F_bᵀ + Q_b)`` with ``a`` first.
    The inputs are not modified.
    """
    while f.shape[0] > 1:
        m = f.shape[0] // 2
        fa, fb = f[0 : 2 * m : 2], f[1 : 2 * m : 2]
        fn = fb @ fa
        qn = fb @ q[0 : 2 * m : 2] @ fb.transpose(0, 2, 1)
        qn += q[1 : 2 * m : 2]
        if f.shape[0] % 2:
            fn = np.concatenate((fn, f[-1:]))
            qn = np.concatenate((qn, q[-1:]))
        f, q = fn, qn
    return f[0], q[0]
