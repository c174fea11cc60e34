"""Synthetic flights with exact IMU, for filter tests and the benchmark (no ROS, no data files).

:class:`AnalyticTrajectory` is a smooth, bounded flight: position a sum of sinusoids, attitude
from sinusoidal yaw/pitch/roll (``R = Rz(ψ) Ry(θ) Rx(φ)``). Everything is analytic: specific
force ``f = Rᵀ (p̈ − g_vec)`` and body rate ``ω = (φ̇ − ψ̇ sθ, θ̇ cφ + ψ̇ cθ sφ, −θ̇ sφ + ψ̇ cθ cφ)``
(the ZYX Euler-rate relation). :func:`simulate_imu` adds white noise of a given density and
random-walk biases, exactly as :class:`~velobins_ekf.config.EkfConfig` models them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from velobins_ekf.config import STANDARD_GRAVITY, EkfConfig
from velobins_ekf.ekf import BA, BG, POS, ROT, VEL, NavState
from velobins_ekf.so3 import so3_exp


def generic_state(rotvec: tuple[float, float, float] = (0.3, -0.5, 1.1)) -> NavState:
    """A generic filter state (tilted, moving, with biases) for Jacobian checks."""
    from scipy.spatial.transform import Rotation

    return NavState(
        Rotation.from_rotvec(rotvec).as_matrix(),
        np.array([1.5, -0.7, 0.4]),
        np.array([3.0, 2.0, -1.0]),
        np.array([0.05, -0.02, 0.1]),
        np.array([0.01, 0.02, -0.03]),
    )


def plus(s: NavState, dx: np.ndarray) -> NavState:
    """X ⊕ δx with the filter's convention (right rotation perturbation)."""
    return NavState(
        s.rot @ so3_exp(dx[ROT]), s.vel + dx[VEL], s.pos + dx[POS], s.acc_bias + dx[BA], s.gyro_bias + dx[BG]
    )


@dataclass(frozen=True)
class TrajectorySample:
    """Ground truth at an array of stamps (leading dimension T)."""

    t: np.ndarray
    pos: np.ndarray
    """(T, 3) world position [m]."""
    vel: np.ndarray
    """(T, 3) world velocity [m/s]."""
    rot: np.ndarray
    """(T, 3, 3) body->world rotation."""
    acc: np.ndarray
    """(T, 3) body specific force [m/s²] (noise-free, bias-free)."""
    gyro: np.ndarray
    """(T, 3) body angular rate [rad/s] (noise-free, bias-free)."""

    @property
    def body_velocity(self) -> np.ndarray:
        """(T, 3) body velocity ``Rᵀ v`` [m/s]."""
        return np.einsum("tji,tj->ti", self.rot, self.vel)


def _euler_zyx(yaw: np.ndarray, pitch: np.ndarray, roll: np.ndarray) -> np.ndarray:
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    rot = np.empty((*yaw.shape, 3, 3))
    rot[..., 0, 0] = cy * cp
    rot[..., 0, 1] = cy * sp * sr - sy * cr
    rot[..., 0, 2] = cy * sp * cr + sy * sr
    rot[..., 1, 0] = sy * cp
    rot[..., 1, 1] = sy * sp * sr + cy * cr
    rot[..., 1, 2] = sy * sp * cr - cy * sr
    rot[..., 2, 0] = -sp
    rot[..., 2, 1] = cp * sr
    rot[..., 2, 2] = cp * cr
    return rot


@dataclass(frozen=True)
class AnalyticTrajectory:
    """Smooth bounded flight; each coordinate is ``Σ A sin(ω t + φ)`` (amplitude, rad/s, rad).

    Defaults: a few metres of lateral motion at up to ~3 m/s, ±0.3 rad roll/pitch, slow yaw.
    """

    pos_terms: tuple[tuple[tuple[float, float, float], ...], ...] = (
        ((3.0, 0.7, 0.0), (1.0, 1.9, 0.5)),
        ((2.0, 0.9, 1.0), (0.8, 2.3, 0.2)),
        ((0.5, 1.1, 0.3), (0.2, 3.1, 1.2)),
    )
    yaw_terms: tuple[tuple[float, float, float], ...] = ((1.2, 0.3, 0.0), (0.3, 1.3, 0.7))
    pitch_terms: tuple[tuple[float, float, float], ...] = ((0.25, 1.7, 0.4), (0.05, 4.0, 0.0))
    roll_terms: tuple[tuple[float, float, float], ...] = ((0.2, 1.5, 1.1), (0.05, 3.7, 0.3))
    gravity: float = STANDARD_GRAVITY

    @staticmethod
    def _series(terms: tuple[tuple[float, float, float], ...], t: np.ndarray) -> tuple[np.ndarray, ...]:
        """Value and first two derivatives of ``Σ A sin(ω t + φ)``."""
        x = np.zeros_like(t)
        dx = np.zeros_like(t)
        ddx = np.zeros_like(t)
        for amp, w, ph in terms:
            arg = w * t + ph
            x += amp * np.sin(arg)
            dx += amp * w * np.cos(arg)
            ddx -= amp * w * w * np.sin(arg)
        return x, dx, ddx

    def sample(self, t: np.ndarray) -> TrajectorySample:
        """Exact ground truth and noise-free IMU at stamps ``t`` [s]."""
        t = np.asarray(t, dtype=np.float64)
        pos = np.empty((t.size, 3))
        vel = np.empty((t.size, 3))
        acc_w = np.empty((t.size, 3))
        for i, terms in enumerate(self.pos_terms):
            pos[:, i], vel[:, i], acc_w[:, i] = self._series(terms, t)
        yaw, dyaw, _ = self._series(self.yaw_terms, t)
        pitch, dpitch, _ = self._series(self.pitch_terms, t)
        roll, droll, _ = self._series(self.roll_terms, t)
        rot = _euler_zyx(yaw, pitch, roll)
        cp, sp, cr, sr = np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
        gyro = np.stack(
            [droll - dyaw * sp, dpitch * cr + dyaw * cp * sr, -dpitch * sr + dyaw * cp * cr],
            axis=1,
        )
        f_world = acc_w + np.array([0.0, 0.0, self.gravity])
        acc = np.einsum("tji,tj->ti", rot, f_world)
        return TrajectorySample(t=t, pos=pos, vel=vel, rot=rot, acc=acc, gyro=gyro)


@dataclass
class NoisyImu:
    """Simulated IMU stream with the truth biases that produced it."""

    t: np.ndarray
    acc: np.ndarray
    """(T, 3) measured specific force [m/s²]."""
    gyro: np.ndarray
    """(T, 3) measured rate [rad/s]."""
    acc_bias: np.ndarray
    """(T, 3) true accelerometer bias [m/s²]."""
    gyro_bias: np.ndarray
    """(T, 3) true gyroscope bias [rad/s]."""


def simulate_imu(
    truth: TrajectorySample,
    config: EkfConfig,
    rng: np.random.Generator,
    acc_bias0: np.ndarray | None = None,
    gyro_bias0: np.ndarray | None = None,
) -> NoisyImu:
    """Add the noise :class:`EkfConfig` models: per-sample white noise ``density/√dt`` and
    random-walk biases with increments ``N(0, rw² dt)`` (dt from the stamps, median for sample 0)."""
    t = truth.t
    n = t.size
    dt = np.diff(t, prepend=t[0] - np.median(np.diff(t)))

    def walk(rw: float, b0: np.ndarray | None) -> np.ndarray:
        steps = rng.standard_normal((n, 3)) * (rw * np.sqrt(dt))[:, None]
        steps[0] = 0.0 if b0 is None else b0
        return np.cumsum(steps, axis=0)

    ba = walk(config.acc_random_walk, acc_bias0)
    bg = walk(config.gyro_random_walk, gyro_bias0)
    sq = 1.0 / np.sqrt(dt)[:, None]
    acc = truth.acc + ba + rng.standard_normal((n, 3)) * config.acc_noise_density * sq
    gyro = truth.gyro + bg + rng.standard_normal((n, 3)) * config.gyro_noise_density * sq
    return NoisyImu(t=t, acc=acc, gyro=gyro, acc_bias=ba, gyro_bias=bg)
