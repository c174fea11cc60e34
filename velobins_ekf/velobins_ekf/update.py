"""The velocity update of the error-state EKF (paper §III-E). State layout: :mod:`velobins_ekf.state`.

Measurement: ``z = v̂_body`` (the network output), ``h(X) = Rᵀ v``, ``H = [[h]×, Rᵀ, 0, 0, 0]``
(from ``Exp(δθ)ᵀ R̂ᵀ (v̂ + δv) ≈ h + [h]× δθ + R̂ᵀ δv``); the measurement covariance is used as
given (no rescaling), χ² gating optional and off by default (paper: none). Joseph-form
covariance update; the error is injected and the covariance reset with ``Jr(δθ̂)`` on the
rotation block (first-order: the new right error is ``Jr(δθ̂)(δθ − δθ̂)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from velobins_ekf.so3 import right_jacobian, skew, so3_exp
from velobins_ekf.state import BA, BG, DIM, POS, ROT, VEL, NavState


@dataclass
class UpdateResult:
    """Diagnostics of one velocity update (per-update record, used for NIS/NEES analysis)."""

    stamp: float
    """Measurement stamp [s] (NaN when the caller gave none)."""
    accepted: bool
    """False when the χ² gate rejected the update (state and covariance then unchanged)."""
    innovation: np.ndarray
    """(3,) z − h(X̂⁻) [m/s], body frame."""
    innovation_cov: np.ndarray
    """(3, 3) S = H P Hᵀ + R_meas."""
    nis: float
    """Normalised innovation squared yᵀ S⁻¹ y (χ²₃ when consistent)."""
    vel_world: np.ndarray
    """(3,) fused world velocity after the update [m/s]."""
    vel_body: np.ndarray
    """(3,) fused body velocity Rᵀ v after the update [m/s]."""
    vel_world_cov: np.ndarray
    """(3, 3) covariance of the fused world velocity (for NEES)."""
    vel_body_cov: np.ndarray
    """(3, 3) covariance of the fused body velocity, H P Hᵀ (for NEES against body ground truth)."""
    pos: np.ndarray
    """(3,) world position right after the update [m] (the ATE/RTE sample of this update)."""
    rot: np.ndarray
    """(3, 3) body->world rotation right after the update (a copy; converting to a quaternion here
    would cost more than the update itself)."""


def measurement_jacobian(state: NavState) -> np.ndarray:
    """H (3x15) of ``h(X) = Rᵀ v`` at ``state``."""
    h = np.zeros((3, DIM))
    rt = state.rot.T
    h[:, ROT] = skew(rt @ state.vel)
    h[:, VEL] = rt
    return h


def body_velocity_covariance(state: NavState, cov: np.ndarray) -> np.ndarray:
    """3x3 covariance ``H P Hᵀ`` of the body-frame velocity ``Rᵀ v``."""
    h6 = measurement_jacobian(state)[:, 0:6]
    return h6 @ cov[0:6, 0:6] @ h6.T


@dataclass
class Innovation:
    """The innovation of a velocity measurement and what the gain needs."""

    y: np.ndarray
    """(3,) ``z − h(X̂)`` [m/s]."""
    s: np.ndarray
    """(3, 3) ``S = H P Hᵀ + R``."""
    nis: float
    """``yᵀ S⁻¹ y``."""
    gain: np.ndarray
    """(n, 3) Kalman gain ``K = P Hᵀ S⁻¹`` (n = 15, 15 + 6N with clones, 18 with a velocity error)."""
    h: np.ndarray
    """(3, n) measurement Jacobian."""


def innovation(state: NavState, cov: np.ndarray, z: np.ndarray, r: np.ndarray) -> Innovation:
    """Innovation, its covariance, NIS and gain of a body velocity ``z`` with covariance ``r``."""
    h_jac = measurement_jacobian(state)
    y = z - state.rot.T @ state.vel
    h6 = h_jac[:, 0:6]
    pht = cov[:, 0:6] @ h6.T  # (15, 3): H is zero beyond the first 6 columns
    return kalman_innovation(y, pht, h6 @ pht[0:6], r, h_jac)


def kalman_innovation(y: np.ndarray, pht: np.ndarray, hpht: np.ndarray, r: np.ndarray, h: np.ndarray) -> Innovation:
    """NIS and gain of an innovation ``y`` from ``P Hᵀ``, ``H P Hᵀ`` and ``R``: ``S = H P Hᵀ + R``,
    ``K = P Hᵀ S⁻¹`` (any measurement and state size: the velocity and displacement updates)."""
    s = hpht + r
    s = 0.5 * (s + s.T)
    # One factorisation of S for both S⁻¹y (NIS) and K = P Hᵀ S⁻¹ (S symmetric).
    sol = np.linalg.solve(s, np.column_stack((y, pht.T)))
    return Innovation(y=y, s=s, nis=float(y @ sol[:, 0]), gain=sol[:, 1:].T, h=h)


def updated_covariance(cov: np.ndarray, inn: Innovation, r: np.ndarray) -> np.ndarray:
    """Joseph form ``(I − KH) P (I − KH)ᵀ + K R Kᵀ`` (a new array; P of any size, e.g. with clones)."""
    k = inn.gain
    ikh = np.eye(cov.shape[0]) - k @ inn.h
    return ikh @ cov @ ikh.T + k @ r @ k.T


def inject(state: NavState, dx: np.ndarray, cov: np.ndarray) -> None:
    """Inject the error estimate ``dx`` into ``state`` and reset ``cov`` (both in place)."""
    dtheta = dx[ROT]
    state.rot = state.rot @ so3_exp(dtheta)
    state.vel += dx[VEL]
    state.pos += dx[POS]
    state.acc_bias += dx[BA]
    state.gyro_bias += dx[BG]
    jr = right_jacobian(dtheta)
    cov[ROT, :] = jr @ cov[ROT, :]
    cov[:, ROT] = cov[:, ROT] @ jr.T
