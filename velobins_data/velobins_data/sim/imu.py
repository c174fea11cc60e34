"""IMU measurement errors: white noise plus a bias random walk, drawn from a seeded generator.

rotorpy's ``sensors.imu.Imu`` draws from NumPy's global RNG, which would make flights depend on what
else ran in the same process (and on the worker a flight lands on). The error model here is the usual
continuous-time one (Kalibr / Allan-variance convention, see :class:`~velobins_data.sim.presets.ImuNoise`)
applied to a whole flight at once from a per-flight ``numpy.random.Generator``:

    y_k = x_k + b_k + n_k,   n_k ~ N(0, σ_c² f),   b_{k+1} = b_k + w_k,   w_k ~ N(0, σ_b² / f),

with b_0 ~ N(0, σ_0²) and f the sample rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from velobins_data.sim.presets import ImuNoise


@dataclass
class ImuErrors:
    """The errors added to one flight's IMU, kept for inspection and tests.

    Attributes:
        acc_bias: (T, 3) accelerometer bias [m/s²].
        gyro_bias: (T, 3) gyroscope bias [rad/s].
        acc_noise: (T, 3) accelerometer white noise [m/s²].
        gyro_noise: (T, 3) gyroscope white noise [rad/s].
    """

    acc_bias: np.ndarray
    gyro_bias: np.ndarray
    acc_noise: np.ndarray
    gyro_noise: np.ndarray


def _bias(rng: np.random.Generator, n: int, initial_std: float, random_walk: float, rate_hz: float) -> np.ndarray:
    """(n, 3) bias path: N(0, initial_std²) start, then random-walk increments of std random_walk/√f."""
    start = rng.normal(0.0, initial_std, size=(1, 3))
    steps = rng.normal(0.0, random_walk / math.sqrt(rate_hz), size=(n - 1, 3))
    return np.concatenate([start, start + np.cumsum(steps, axis=0)], axis=0)


def draw_imu_errors(noise: ImuNoise, n: int, rate_hz: float, rng: np.random.Generator) -> ImuErrors:
    """Draw the IMU errors of an ``n``-sample flight sampled at ``rate_hz``."""
    if n < 1 or rate_hz <= 0:
        raise ValueError(f"draw_imu_errors: need n >= 1 and rate_hz > 0, got n={n}, rate_hz={rate_hz}")
    acc_bias = _bias(rng, n, noise.acc_initial_bias_std, noise.acc_random_walk, rate_hz)
    gyro_bias = _bias(rng, n, noise.gyro_initial_bias_std, noise.gyro_random_walk, rate_hz)
    acc_noise = rng.normal(0.0, noise.acc_density * math.sqrt(rate_hz), size=(n, 3))
    gyro_noise = rng.normal(0.0, noise.gyro_density * math.sqrt(rate_hz), size=(n, 3))
    return ImuErrors(acc_bias=acc_bias, gyro_bias=gyro_bias, acc_noise=acc_noise, gyro_noise=gyro_noise)
