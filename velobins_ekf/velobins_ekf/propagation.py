"""IMU propagation of the error-state EKF: error transition F and noise Q (paper §III-E, after
AI-IO). State and error layout: :mod:`velobins_ekf.state`.

The nominal scheme over one IMU interval ``dt`` is :mod:`velobins_ekf.nominal`'s (with ``h = (ω −
b_g) dt / 2``, ``φ = 2h``, ``ā = f − b_a``, mid-interval attitude ``R_m = R Exp(h)``). Its exact
first-order error dynamics ``δx⁺ = F δx + G n`` are::

    δθ⁺ = Exp(φ)ᵀ δθ − Jr(φ) dt (δb_g + n_g)
    δv⁺ = δv − R_m [ā]× Exp(h)ᵀ dt δθ − R_m dt (δb_a + n_a) + ½ dt² R_m [ā]× Jr(h) (δb_g + n_g)
    δp⁺ = δp + dt δv + ½ dt (δv⁺ − δv)                        (same blocks scaled by dt/2)
    δb⁺ = δb + n_b

The IMU white noise enters exactly like the bias error, so ``G`` is ``F``'s bias columns. The
samples are zero-order held, so a density σ [unit/√Hz] is a per-sample variance σ²/dt and a bias
random walk σ_b gives an increment variance σ_b² dt: ``Q = G diag(σ_a²/dt, σ_g²/dt) Gᵀ +
diag(0, σ_ba² dt, σ_bg² dt)``, exact for this discrete model.

Each formula is written once and serves both ways the filter runs (like TLIO's
``propagate_rvt_and_jac``: one readable function, made fast): with floats and (3,)/(3, 3) arrays
for one interval (the filter read after every IMU sample), or with arrays of leading length n for
a block of intervals (the filter read at the updates, where the n covariance steps fold into one,
:func:`compose`; the nominal chain of a block is :mod:`velobins_ekf.batch`'s).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.so3 import exp_coefficients, skew, stack_entries
from velobins_ekf.state import BA, BG, DIM, POS, ROT, VEL

EXP_HALF, EXP_FULL_T, NEG_DT_JR_FULL, NEG_DT_EXP_HALF_T, HALF_DT2_JR_HALF = range(5)
"""Indices of :func:`interval_series`: ``Exp(h)``, ``Exp(φ)ᵀ``, ``−dt Jr(φ)``, ``−dt Exp(h)ᵀ``,
``½dt² Jr(h)``."""

_EYE15 = np.eye(DIM)
_DT_REL_TOL = 1e-9  # one interval: dt changes below this relative size (stamp round-off) keep the noise terms


class Interval(NamedTuple):
    """Linearisation point of one IMU interval (``dt`` a float) or of a block (leading axis n)."""

    dt: float | np.ndarray
    """Interval length [s]."""
    r_mid: np.ndarray
    """(…, 3, 3) mid-interval attitude ``R_m``."""
    acc: np.ndarray
    """(…, 3) bias-corrected specific force ``ā`` [m/s²]."""
    series: np.ndarray
    """(…, 5, 3, 3) :func:`interval_series` of the interval."""


def white_noise_variance(density, dt):
    """Per-sample variance ``σ²/dt`` of white noise of density σ [unit/√Hz] held over ``dt`` [s]."""
    return density * density / dt


def random_walk_variance(random_walk, dt):
    """Increment variance ``σ_b² dt`` over ``dt`` [s] of a bias random walk σ_b [unit/s/√Hz]."""
    return random_walk * random_walk * dt


def interval_series(dt, hx, hy, hz) -> np.ndarray:
    """The five SO(3) series an interval needs, (…, 5, 3, 3) in the order of :data:`EXP_HALF` ….

    With ``K = [h]×`` and ``K² = h hᵀ − |h|² I`` each is ``c₀ I + c₁ K + c₂ K²``, and one small
    matrix product gives all five. ``Exp = I + aK + bK²`` and ``Jr = I − bK + cK²``
    (:func:`~velobins_ekf.so3.exp_coefficients` of ``|h|²``); the full angle ``φ = 2h`` has
    ``K_φ = 2K``, ``K_φ² = 4K²`` and, by the double-angle identities, the coefficients
    ``a_φ = a (1 − b|h|²)``, ``b_φ = a²/2``, ``c_φ = (c + ab)/4``.
    """
    t2 = hx * hx + hy * hy + hz * hz
    a, b, c = exp_coefficients(t2)
    lead = t2.shape if isinstance(t2, np.ndarray) else ()
    half_dt2 = 0.5 * dt * dt
    a2 = a * a
    # fmt: off
    coefficients = stack_entries((
        1.0, a, b,                                  # Exp(h)
        1.0, -2.0 * a * (1.0 - b * t2), 2.0 * a2,   # Exp(φ)ᵀ = I − 2a_φ K + 4b_φ K²
        -dt, a2 * dt, -(c + a * b) * dt,            # −dt Jr(φ) = −dt (I − 2b_φ K + 4c_φ K²)
        -dt, a * dt, -b * dt,                       # −dt Exp(h)ᵀ
        half_dt2, -b * half_dt2, c * half_dt2,      # ½dt² Jr(h)
    ), lead, (5, 3))
    xx, yy, zz, xy, xz, yz = hx * hx - t2, hy * hy - t2, hz * hz - t2, hx * hy, hx * hz, hy * hz
    basis = stack_entries((
        1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0,  # I
        0.0, -hz, hy, hz, 0.0, -hx, -hy, hx, 0.0,     # K
        xx, xy, xz, xy, yy, yz, xz, yz, zz,           # K²
    ), lead, (3, 9))
    # fmt: on
    return (coefficients @ basis).reshape((*lead, 5, 3, 3))


class Transition:
    """``F`` and ``Q`` of one interval (``lead == ()``) or of a block of n (``lead == (n,)``).

    :meth:`build` writes the formulas of the module docstring into buffers made once, through
    views made once: on 3x3 blocks, slicing costs as much as the arithmetic, and the filter builds
    one interval's ``F`` and ``Q`` after every IMU sample when it is read at that rate. For the
    same reason a one-interval instance keeps its noise terms while ``dt`` stays the same (to
    ``1e-9`` relative: stamp round-off); ``transpose`` is ``Fᵀ``, a view.
    """

    def __init__(self, lead: tuple[int, ...] = ()):
        self.f = f = np.empty((*lead, DIM, DIM))
        f[...] = _EYE15
        self.q = q = np.zeros((*lead, DIM, DIM))
        self._f_rot_rot, self._f_rot_bg = f[..., ROT, ROT], f[..., ROT, BG]
        self._f_vel_rot, self._f_vel_ba, self._f_vel_bg = f[..., VEL, ROT], f[..., VEL, BA], f[..., VEL, BG]
        self._f_pos_rot, self._f_vel_bias, self._f_pos_bias = f[..., POS, ROT], f[..., VEL, 9:15], f[..., POS, 9:15]
        self.transpose = np.swapaxes(f, -1, -2)
        self._g = f[..., 0:9, 9:15]  # G, F's bias columns
        self._g_t = np.swapaxes(self._g, -1, -2)
        self._gw = np.empty((*lead, 9, 6))
        self._q_nav = q[..., 0:9, 0:9]
        self._q_bias_diag = np.einsum("...ii->...i", q)[..., 9:15]  # writable view
        self._f_pos_vel_diag = np.einsum("...ii->...i", f[..., POS, VEL])  # writable view
        self._lead = lead
        self._noise_dt = math.nan  # dt of the noise terms in place (one interval: kept while dt stays)
        self._white = np.empty((*lead, 1, 6))

    def _set_noise(self, dt, config: EkfConfig) -> None:
        """The dt-dependent noise terms: ``W`` for ``G W Gᵀ`` and the bias-walk diagonal of ``Q``."""
        wa = white_noise_variance(config.acc_noise_density, dt)
        wg = white_noise_variance(config.gyro_noise_density, dt)
        qa = random_walk_variance(config.acc_random_walk, dt)
        qg = random_walk_variance(config.gyro_random_walk, dt)
        variances = stack_entries((wa, wa, wa, wg, wg, wg, qa, qa, qa, qg, qg, qg), self._lead, (2, 6))
        self._white = variances[..., 0:1, :]
        self._q_bias_diag[...] = variances[..., 1, :]
        self._noise_dt = dt

    def build(self, iv: Interval, config: EkfConfig) -> tuple[np.ndarray, np.ndarray]:
        """``(F, Q)`` of ``iv`` (the buffers themselves: the next call overwrites them)."""
        lead = self._lead
        dt = iv.dt if not lead else iv.dt[:, None, None]
        hd = 0.5 * dt
        s = iv.series
        self._f_rot_rot[...] = s[..., EXP_FULL_T, :, :]
        self._f_rot_bg[...] = s[..., NEG_DT_JR_FULL, :, :]
        # δv⁺ rows: −dt R_m [ā]× Exp(h)ᵀ (rotation) and ½dt² R_m [ā]× Jr(h) (gyro bias), −dt R_m (acc bias)
        r_acc = iv.r_mid @ skew(iv.acc)
        np.matmul(r_acc, s[..., NEG_DT_EXP_HALF_T, :, :], out=self._f_vel_rot)
        np.matmul(r_acc, s[..., HALF_DT2_JR_HALF, :, :], out=self._f_vel_bg)
        np.multiply(iv.r_mid, -dt, out=self._f_vel_ba)
        # δp⁺ = δp + dt δv + ½ dt (δv⁺ − δv)
        np.multiply(self._f_vel_rot, hd, out=self._f_pos_rot)
        np.multiply(self._f_vel_bias, hd, out=self._f_pos_bias)
        self._f_pos_vel_diag[...] = iv.dt if not lead else iv.dt[:, None]
        # Q = G W Gᵀ + bias random walks, W = diag(σ_a², σ_g²)/dt
        if lead or not abs(iv.dt - self._noise_dt) <= _DT_REL_TOL * iv.dt:  # also true for the initial NaN
            self._set_noise(iv.dt, config)
        np.multiply(self._g, self._white, out=self._gw)
        np.matmul(self._gw, self._g_t, out=self._q_nav)
        return self.f, self.q


def transition_and_noise(iv: Interval, config: EkfConfig) -> tuple[np.ndarray, np.ndarray]:
    """Error-state transition ``F`` and process noise ``Q``, 15x15 (or (n, 15, 15) for a block), of
    linearisation points ``iv`` (formulas in the module docstring; densities from ``config``)."""
    return Transition(np.shape(iv.dt)).build(iv, config)


def concatenate(intervals: list[Interval]) -> Interval:
    """One block of the queued linearisation points (single intervals and blocks), in order."""
    if not any(isinstance(iv.dt, np.ndarray) for iv in intervals):
        return Interval(*(np.array(field) for field in zip(*intervals, strict=True)))
    blocks = [iv if isinstance(iv.dt, np.ndarray) else Interval(*(np.asarray(x)[None] for x in iv)) for iv in intervals]
    return Interval(*(np.concatenate(field) for field in zip(*blocks, strict=True)))


def compose(f: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold ``n`` steps ``P ← F_k P F_kᵀ + Q_k`` into one ``(Φ, Q_Σ)`` (pairwise, log depth).

    Pairs combine as ``(F_b, Q_b) ∘ (F_a, Q_a) = (F_b F_a, F_b Q_a F_bᵀ + Q_b)`` with ``a`` first;
    ``P_n = Φ P_0 Φᵀ + Q_Σ`` equals the ``n`` sequential steps up to round-off. The inputs are
    not modified.
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
