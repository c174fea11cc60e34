"""Input integrity of the filter: IMU plausibility (unit, frame) and what an IMU gap does to the state.

Two checks the streaming filter (:class:`~velobins_ekf.runner.VelocityEkf`) applies, so that a wrong
input says what it is instead of giving a silent wait or an upside-down filter:

* **specific force** (:func:`check_specific_force`): for a multirotor, the specific force in its
  body frame points along body +z (FLU) whatever it does: at rest it is ``Rᵀ (0, 0, g)`` with a
  small tilt, in flight it is the thrust (along +z) plus a small drag. Over a window its mean
  magnitude is close to g (a multirotor does not free-fall for long). So a mean magnitude near 1
  means an IMU in g instead of m/s², near 0 a dead accelerometer or free fall, far above g a wrong
  scale; a mean pointing more than ``imu_max_tilt`` away from +z, and along −z, an FRD (NED-style)
  IMU published as FLU. Applied to the alignment window before the filter initialises itself
  (refusing to start), and to every ``imu_check_window`` while it runs (:class:`SpecificForceMonitor`).
* **IMU gap** (:func:`gap_inflation`): an interval longer than ``max_imu_interval`` (samples lost, a
  stopped driver, or the stamps jumping forward) is not propagated: over it the inputs are unknown,
  and one propagation over seconds turns a stale sample into metres (or, for a clock jump with no
  time passed, into pure error). The filter *holds*: it keeps its state, moves its time to the new
  stamp and grows its covariance by what the gap can hide, :func:`gap_inflation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.state import POS, ROT, VEL, NavState, initial_covariance

G_UNIT_BAND = (0.7, 1.3)
"""Mean specific-force magnitudes [in the published unit] read as "an IMU in g" (1 g at rest, a little
more in flight): a float the published value has when the driver left g for m/s²."""


@dataclass(frozen=True)
class ImuFault:
    """An implausible IMU: ``cause`` a short key (counted, tested), ``message`` what it likely is and the fix."""

    cause: str
    message: str


def check_specific_force(mean_force: np.ndarray, mean_norm: float, config: EkfConfig) -> ImuFault | None:
    """The fault a window of body specific force shows, or None when it is plausible (module docstring).

    Args:
        mean_force: (3,) mean specific force of the window [published unit, m/s² expected].
        mean_norm: mean of the samples' magnitudes (robust to the body turning within the window).
        config: gravity and the thresholds ``imu_force_min``, ``imu_force_max``, ``imu_max_tilt``.
    """
    g = config.gravity
    ratio = mean_norm / g
    if ratio < config.imu_force_min:
        if G_UNIT_BAND[0] <= mean_norm <= G_UNIT_BAND[1]:
            return ImuFault(
                "imu_in_g",
                f"IMU specific force averages {mean_norm:.2f} (expected ≈ {g:.2f} m/s²): linear_acceleration "
                f"is in g, not m/s² (sensor_msgs/Imu is SI); scale it by {g:.5g} in the driver or bridge",
            )
        return ImuFault(
            "imu_force_low",
            f"IMU specific force averages {mean_norm:.3g} m/s² (< {config.imu_force_min:g} g): a dead accelerometer, "
            "a wrong unit or scale, or free fall",
        )
    if ratio > config.imu_force_max:
        return ImuFault(
            "imu_force_high",
            f"IMU specific force averages {mean_norm:.4g} m/s² (> {config.imu_force_max:g} g): wrong unit or scale "
            f"(in mg? then scale by {g / 1000.0:.5g})",
        )
    norm = float(np.linalg.norm(mean_force))
    if norm < config.imu_force_min * mean_norm:
        return ImuFault(
            "imu_unsteady",
            f"IMU specific force turned within the window (|mean| {norm:.3g} m/s² against a mean magnitude "
            f"{mean_norm:.3g} m/s²): the IMU's frame or unit changed, or the vehicle tumbles",
        )
    tilt = math.acos(max(-1.0, min(1.0, float(mean_force[2]) / norm))) if norm > 0 else math.pi
    if tilt > config.imu_max_tilt:
        if mean_force[2] < 0:
            return ImuFault(
                "imu_frd_as_flu",
                f"gravity points along body −z (specific force {math.degrees(tilt):.0f}° from +z): an FRD (NED-style) "
                "IMU published as FLU? Set imu_to_body [1.0, 0.0, 0.0, 0.0] or publish its frame on /tf_static "
                "(or the vehicle is upside down)",
            )
        return ImuFault(
            "imu_tilted",
            f"specific force {math.degrees(tilt):.0f}° from body +z (> imu_max_tilt "
            f"{math.degrees(config.imu_max_tilt):.0f}°): IMU mounted in another orientation than its frame says? "
            "Set imu_to_body or the static transform",
        )
    return None


class SpecificForceMonitor:
    """:func:`check_specific_force` over consecutive windows of ``config.imu_check_window`` seconds.

    :meth:`add` is cheap (a few float additions per sample); the check runs when a window is full,
    and :attr:`fault` holds the last full window's verdict (None: plausible, or no full window yet).
    """

    def __init__(self, config: EkfConfig) -> None:
        self.config = config
        self.fault: ImuFault | None = None
        self.windows = 0
        self._start: float | None = None
        self._sum = [0.0, 0.0, 0.0, 0.0]  # f_x, f_y, f_z, |f|
        self._n = 0

    def add(self, t: float, fx: float, fy: float, fz: float) -> ImuFault | None:
        """One sample at stamp ``t`` [s]; returns the verdict when it completed a window (else the last one)."""
        if self._start is None:
            self._start = t
        s = self._sum
        s[0] += fx
        s[1] += fy
        s[2] += fz
        s[3] += math.sqrt(fx * fx + fy * fy + fz * fz)
        self._n += 1
        if t - self._start >= self.config.imu_check_window:
            n = self._n
            self.fault = check_specific_force(np.array(s[:3]) / n, s[3] / n, self.config)
            self.windows += 1
            self.restart()
        return self.fault

    def restart(self) -> None:
        """Start a new window with the next sample (after a gap or a reset); the verdict is kept."""
        self._start = None
        self._sum = [0.0, 0.0, 0.0, 0.0]
        self._n = 0


MAX_HELD_ROT_SIGMA = 0.5
"""Largest attitude σ [rad] per axis a hold adds: beyond it the small-angle error state means nothing."""


def gap_inflation(state: NavState, config: EkfConfig, gap: float) -> np.ndarray:
    """Covariance (15x15) added to the filter's when it holds over an IMU gap of ``gap`` seconds.

    What the gap can hide: attitude, velocity and biases changed in unknown ways, so each gets its
    initial uncertainty again (:func:`~velobins_ekf.state.initial_covariance`, added: the filter
    keeps what it knew, and P stays positive definite), and what the vehicle could do in the gap on
    top: the velocity ``gap_accel_sigma · gap`` per axis, the attitude ``gap_rate_sigma · gap`` per
    world axis (at most :data:`MAX_HELD_ROT_SIGMA`). With the initial σ alone, the state kept over a
    1.5 s gap of an agile flight was off by metres per second and tens of degrees while claiming 0.1
    m/s and 1°: the updates after it failed the node's NIS test for seconds. The held position misses
    the distance flown at the last velocity, ``|v| · gap`` per axis. A stamp jump that hid no time (a
    clock reset) inflates as much: from stamps alone the two cannot be told apart.
    """
    out = initial_covariance(config, state.rot)
    out[VEL, VEL] += np.eye(3) * (config.gap_accel_sigma * gap) ** 2
    rot_sigma = min(config.gap_rate_sigma * gap, MAX_HELD_ROT_SIGMA)
    out[ROT, ROT] += np.eye(3) * rot_sigma**2  # the same σ about every axis: about world and body axes alike
    out[POS, POS] = np.eye(3) * (float(np.linalg.norm(state.vel)) * gap) ** 2
    return out
