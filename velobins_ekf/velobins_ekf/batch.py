"""Block propagation of the nominal state: n queued IMU intervals at once, calling the one step.

The filter reads its state at the updates (offline evaluation) or at the odometry rate (the node),
so the IMU intervals between two reads are queued and integrated as a block
(:class:`~velobins_ekf.ekf.ErrorStateEkf`). The nominal step is :func:`velobins_ekf.nominal.nominal_step`'s;
this module only chains it:

* the attitudes at the start of the intervals are the prefix products ``R Exp(2h_0) ⋯ Exp(2h_{k−1})``
  (a log-depth scan, :func:`prefix_products`), since the attitude does not depend on the other states;
* the step then runs once on the whole block, each interval from its own start attitude and from
  zero velocity and position: it returns each interval's velocity increment ``a_w dt`` and position
  increment ``½ a_w dt²``;
* velocity and position are linear in those: ``v_{k+1} = v_k + Δv_k`` and ``p_{k+1} = p_k + v_k dt_k
  + Δp_k``, two cumulative sums.

The result equals the step applied interval by interval, to round-off (``test_batch``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from velobins_ekf.nominal import nominal_step, rotation_series
from velobins_ekf.propagation import EXP_HALF, Interval
from velobins_ekf.state import NavState


class Poses(NamedTuple):
    """Nominal pose at the end of each interval of a block (row k: after interval k)."""

    rot: np.ndarray
    """(n, 3, 3) body->world rotation."""
    vel: np.ndarray
    """(n, 3) world velocity [m/s]."""
    pos: np.ndarray
    """(n, 3) world position [m]."""


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


def propagate_block(state: NavState, gravity: float, samples: np.ndarray) -> tuple[Interval, Poses]:
    """Integrate ``state`` in place over a block of ``n`` intervals (see the module docstring).

    ``samples`` is (n, 7): ``(dt, f_x, f_y, f_z, ω_x, ω_y, ω_z)``, the intervals' mean specific force
    [m/s²] and rate [rad/s]. The biases are constant over a block (they change only in updates).
    Returns the block's linearisation points and the pose after every interval (a caller recording
    the trajectory per sample reads them instead of the state).
    """
    n = samples.shape[0]
    dt = samples[:, 0]
    series = rotation_series(dt, samples[:, 4:7], state.gyro_bias)
    start = np.empty((n, 3, 3))  # attitude at the start of each interval
    start[0] = state.rot
    if n > 1:
        e_half = series[:-1, EXP_HALF]
        np.matmul(state.rot, prefix_products(e_half @ e_half), out=start[1:])
    acc = samples[:, 1:4] - state.acc_bias
    zero = np.zeros((n, 3))
    step = nominal_step(start, zero, zero, acc, series, dt, gravity)  # increments from rest at the origin
    vel = np.cumsum(step.vel, axis=0)
    vel += state.vel
    vel_start = np.empty((n, 3))
    vel_start[0] = state.vel
    vel_start[1:] = vel[:-1]
    pos = np.cumsum(vel_start * dt[:, None] + step.pos, axis=0)
    pos += state.pos
    state.pos = pos[-1].copy()
    state.vel = vel[-1].copy()
    state.rot = step.rot[-1].copy()
    return Interval(dt, step.r_mid, acc, series), Poses(step.rot, vel, pos)
