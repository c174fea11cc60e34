"""The nominal IMU step of the error-state EKF, written once (paper §III-E, after AI-IO and TLIO).

Over one interval ``dt`` with the interval's mean specific force ``f`` and rate ``ω`` (the
:class:`~velobins_ekf.runner.VelocityEkf` wrapper averages the two bounding samples, which makes
the scheme second-order accurate)::

    h = (ω − b_g) dt / 2,   ā = f − b_a,   R_m = R Exp(h)          (mid-interval attitude)
    a_w = R_m ā + g_vec,    g_vec = (0, 0, −g)
    p⁺ = p + v dt + ½ a_w dt²,   v⁺ = v + a_w dt,   R⁺ = R_m Exp(h) = R Exp(2h)

Like TLIO's ``propagate_rvt_and_jac``, :func:`nominal_step` is one readable function: it takes
one interval (``rot`` (3, 3), vectors (3,), ``dt`` a float) or n independent intervals at once
(leading axis n, each row from its own start). The filter's block propagation
(:mod:`velobins_ekf.batch`) calls it on a whole block; its error-state transition and noise are
:mod:`velobins_ekf.propagation`'s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from velobins_ekf.propagation import EXP_HALF, interval_series


class Step(NamedTuple):
    """The result of :func:`nominal_step` (leading axis n for a block)."""

    r_mid: np.ndarray
    """(…, 3, 3) mid-interval attitude ``R_m`` (the interval's linearisation point)."""
    rot: np.ndarray
    """(…, 3, 3) attitude at the end of the interval."""
    vel: np.ndarray
    """(…, 3) world velocity at the end of the interval [m/s]."""
    pos: np.ndarray
    """(…, 3) world position at the end of the interval [m]."""


def rotation_series(dt, gyro: np.ndarray, gyro_bias: np.ndarray) -> np.ndarray:
    """:func:`~velobins_ekf.propagation.interval_series` of the half-angle ``h = (ω − b_g) dt / 2``:
    (5, 3, 3) for one interval (``dt`` a float, ``gyro`` (3,)), (n, 5, 3, 3) for n (``dt`` (n,))."""
    if isinstance(dt, float):
        hx, hy, hz = ((gyro - gyro_bias) * (0.5 * dt)).tolist()  # one interval: the series take floats
        return interval_series(dt, hx, hy, hz)
    h = (gyro - gyro_bias) * (0.5 * dt)[:, None]
    return interval_series(dt, h[:, 0], h[:, 1], h[:, 2])


def nominal_step(
    rot: np.ndarray, vel: np.ndarray, pos: np.ndarray, acc: np.ndarray, series: np.ndarray, dt, gravity: float
) -> Step:
    """Integrate ``(rot, vel, pos)`` over the interval (the module docstring's scheme).

    Args:
        rot, vel, pos: attitude (body->world), world velocity and position at the interval's start.
        acc: bias-corrected specific force ``ā = f − b_a`` [m/s²], body frame.
        series: the interval's :func:`rotation_series` (``Exp(h)`` is its first entry).
        dt: interval length [s]: a float, or (n,) for a block.
        gravity: g [m/s²].

    ``p⁺ = p + v dt + ½ a_w dt²`` is computed as ``p + ½ (v + v⁺) dt``, the same number in fewer
    operations.
    """
    e_half = series[..., EXP_HALF, :, :]
    r_mid = rot @ e_half
    a_w = (r_mid @ acc[..., None])[..., 0]
    a_w[..., 2] -= gravity
    dt_col = dt if isinstance(dt, float) else dt[:, None]
    vel_next = vel + a_w * dt_col
    return Step(r_mid, r_mid @ e_half, vel_next, pos + (vel + vel_next) * (0.5 * dt_col))
