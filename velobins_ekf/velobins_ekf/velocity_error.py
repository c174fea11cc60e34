"""A slow error of the velocity measurements, kept in the filter as a Gauss-Markov state.

The paper's filter (§III-E) takes each network estimate as ``z = Rᵀv + n`` with white ``n``. A network's
consecutive estimates share most of their 1 s window, so its errors last about as long (0.5–1 s on the simulated
platforms; ``velobins calibrate`` prints it): a filter that takes them as independent believes a wrong turn 20
times a second, and calibration can only make up for it by inflating every variance (docs/calibrate.md,
"Limits"). With ``EkfConfig.velocity_error_sigma`` > 0 the measurement model becomes ::

    z = Rᵀv + b + n,    b(t + dt) = a b(t) + w,    a = exp(−dt/τ),    var(w) = σ_b² (1 − a²)

b (3,) a first-order Gauss-Markov error in the body frame, stationary variance σ_b² per axis and correlation
time τ (``velocity_error_tau``) — the colour of a measurement error handled by state augmentation (Bryson &
Henrikson, "Estimation using sampled data containing sequentially correlated noise", 1968; Gelb, *Applied
Optimal Estimation*, §4.5). The error state becomes ``[δx (15), δb (3)]``; like the clones
(:mod:`velobins_ekf.clone`), b is kept as blocks beside the navigation covariance, which stays the filter's
own 15x15 array:

* ``P_xb`` (15 x 3) — :attr:`VelocityError.cross`;
* ``P_bb`` (3 x 3) — :attr:`VelocityError.cov`.

The augmented transition is ``diag(Φ, a I)`` and the noise ``diag(Q, σ_b²(1 − a²) I)``, so a block of
intervals with navigation transition Φ and total length T moves the blocks exactly as one step does
(:func:`propagate`): ``P_xb ← a Φ P_xb``, ``P_bb ← a² P_bb + σ_b²(1 − a²) I`` with ``a = exp(−T/τ)``. The velocity
update's Jacobian gains ``∂z/∂b = I`` (:func:`kalman_update`); b is additive, so its injection needs no
reset. The outputs (odometry, records) are the vehicle's velocity ``Rᵀv``, never ``Rᵀv + b``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from velobins_ekf.state import DIM, NavState, join_blocks, split_blocks
from velobins_ekf.update import Innovation, inject, kalman_innovation, measurement_jacobian, updated_covariance

ERROR_DIM = 3
"""Dimension of b."""


def decay(dt: float, tau: float) -> float:
    """``a = exp(−dt/τ)``: how much of b survives ``dt`` seconds."""
    return math.exp(-dt / tau)


@dataclass
class VelocityError:
    """b, its covariance and its cross-covariance with the navigation error (one filter's)."""

    sigma: float
    """Stationary σ_b [m/s] per axis."""
    tau: float
    """Correlation time τ [s]."""
    value: np.ndarray = field(default_factory=lambda: np.zeros(ERROR_DIM))
    """(3,) the estimate of b [m/s], body frame."""
    cross: np.ndarray = field(default_factory=lambda: np.zeros((DIM, ERROR_DIM)))
    """(15, 3) ``P_xb``."""
    cov: np.ndarray = field(default_factory=lambda: np.zeros((ERROR_DIM, ERROR_DIM)))
    """(3, 3) ``P_bb``."""

    @classmethod
    def prior(cls, sigma: float, tau: float) -> VelocityError:
        """b unknown: zero mean, the stationary covariance σ_b² I, uncorrelated with the navigation error."""
        if not (sigma > 0 and tau > 0):
            raise ValueError(f"VelocityError: sigma and tau must be > 0, got {sigma!r}, {tau!r}")
        return cls(float(sigma), float(tau), cov=np.eye(ERROR_DIM) * sigma * sigma)

    def copy(self) -> VelocityError:
        """Deep copy (the snapshots of late-measurement re-propagation)."""
        return VelocityError(self.sigma, self.tau, self.value.copy(), self.cross.copy(), self.cov.copy())


def propagate(err: VelocityError, phi: np.ndarray, dt: float) -> None:
    """Move b and its blocks over ``dt`` seconds of navigation transition ``phi`` (15 x 15), in place."""
    a = decay(dt, err.tau)
    err.value *= a
    err.cross = (phi @ err.cross) * a
    err.cov = err.cov * (a * a) + np.eye(ERROR_DIM) * (err.sigma * err.sigma * (1.0 - a * a))


def augmented_jacobian(h_nav: np.ndarray) -> np.ndarray:
    """The velocity update's Jacobian (3 x 18) of ``z = Rᵀv + b`` from the navigation part ``h_nav`` (3 x 15)."""
    h = np.zeros((3, DIM + ERROR_DIM))
    h[:, :DIM] = h_nav
    h[:, DIM:] = np.eye(ERROR_DIM)
    return h


def kalman_update(
    state: NavState, nav_cov: np.ndarray, err: VelocityError, z: np.ndarray, r: np.ndarray, gate: float | None
) -> tuple[Innovation, np.ndarray | None]:
    """The velocity update of ``[δx, δb]`` for ``z = Rᵀv + b + n``: the 15-D update's gain and Joseph form
    (:mod:`velobins_ekf.update`) on the augmented covariance, the error injected into ``state`` and ``err.value``
    (b is additive: no reset). Returns the innovation and the updated 18x18 covariance for the caller's PD guard and
    :func:`split`, or None (nothing changed) when the NIS exceeds ``gate``."""
    h = augmented_jacobian(measurement_jacobian(state))
    p = assemble(nav_cov, err)
    pht = p @ h.T
    inn = kalman_innovation(z - state.rot.T @ state.vel - err.value, pht, h @ pht, r, h)
    if gate is not None and inn.nis > gate:
        return inn, None
    p_new = updated_covariance(p, inn, r)
    dx = inn.gain @ inn.y
    inject(state, dx[:DIM], p_new)
    err.value = err.value + dx[DIM:]
    return inn, p_new


def assemble(nav_cov: np.ndarray, err: VelocityError) -> np.ndarray:
    """The covariance ``[[P_xx, P_xb], [P_xbᵀ, P_bb]]`` of ``[δx, δb]`` (a new array)."""
    return join_blocks(nav_cov, err.cross, err.cov)


def split(full: np.ndarray, nav_cov: np.ndarray, err: VelocityError) -> None:
    """Write an augmented covariance back into ``nav_cov`` (in place) and ``err``'s blocks."""
    err.cross, err.cov = split_blocks(full, nav_cov)
