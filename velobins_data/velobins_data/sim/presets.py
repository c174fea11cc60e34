"""Vehicle presets of the simulator: rotorpy parameters plus the sensors a real platform logs.

A :class:`Preset` bundles everything that differs between the three simulated platforms:

* ``nano``  — Crazyflie 2.x class (rotorpy's own ``crazyflie_params``), commanded PWM, 100 Hz, ≤ 2 m/s:
  NanoBench-like (paper Table ``tab:datasets``: v̄ 0.5 m/s, v_max 2.0 m/s, PWM input).
* ``racer`` — 5-inch racing quadrotor, commanded throttle, up to ~20 m/s: TII-RATM-like
  (v̄ 3.5 m/s, v_max 21.8 m/s, PWM input).
* ``rpm``   — 0.75 kg agile quadrotor with ESC telemetry (rotor speed in rad/s), up to ~14 m/s:
  NeuroBEM / AI-IO-like (RPM input).

Physics is rotorpy's (``rotorpy.vehicles.multirotor.Multirotor``) with rotor drag (``k_d``) and
induced inflow (``k_z``) non-zero and ``aero=True``: the rotor-drag force ``H = -ω_i K v_local`` is what
makes body velocity observable from the IMU plus the rotor signal (paper §III-B uses the rotor signal
as an input for that reason).

Why a map from speed to command: NanoBench and TII-RATM log the *command* the flight controller sent
(paper §III-B, "commanded motor signal"), normalised here to [0, 1]. :class:`PwmMap` is an affine map
between the commanded rotor speed [rad/s] and that command; the rotor then follows it through
rotorpy's first-order motor lag ``tau_m``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from rotorpy.vehicles.crazyflie_params import quad_params as _CRAZYFLIE_PARAMS

from velobins_common.constants import ROTOR_COMMAND, ROTOR_KINDS, ROTOR_SPEED, RPM_TO_RAD_PER_S

ROTOR_ORDER = ("front_left", "front_right", "rear_right", "rear_left")
"""Column order of the rotor signal (rotorpy's ``r1..r4`` in a body FLU X layout)."""


@dataclass(frozen=True)
class PwmMap:
    """Affine map between commanded rotor speed ω [rad/s] and a command u ∈ [0, 1].

    ``u = clip((ω - omega_at_zero) / (omega_at_full - omega_at_zero), 0, 1)``.

    Attributes:
        omega_at_zero: rotor speed [rad/s] the map assigns to u = 0.
        omega_at_full: rotor speed [rad/s] reached at u = 1 (the preset's maximum rotor speed).
        reference: where the numbers come from.
    """

    omega_at_zero: float
    omega_at_full: float
    reference: str

    def __post_init__(self) -> None:
        if not self.omega_at_full > self.omega_at_zero >= 0.0:
            raise ValueError(
                f"PwmMap: need omega_at_full > omega_at_zero >= 0, got {self.omega_at_zero}, {self.omega_at_full}"
            )

    def to_command(self, omega: np.ndarray) -> np.ndarray:
        """Rotor speed [rad/s] → normalised command in [0, 1] (clipped)."""
        span = self.omega_at_full - self.omega_at_zero
        return np.clip((np.asarray(omega, dtype=np.float64) - self.omega_at_zero) / span, 0.0, 1.0)

    def to_speed(self, command: np.ndarray) -> np.ndarray:
        """Normalised command → steady-state rotor speed [rad/s] (inverse of :meth:`to_command` on (0, 1))."""
        span = self.omega_at_full - self.omega_at_zero
        return self.omega_at_zero + np.asarray(command, dtype=np.float64) * span


@dataclass(frozen=True)
class ImuNoise:
    """Continuous-time IMU noise densities (Kalibr/Allan-variance convention).

    Per sample at rate f: white noise σ_d = density · √f; the bias does a random walk with
    increments of std ``random_walk · √(1/f)``; the initial bias is drawn from N(0, initial_bias_std²).
    The densities are *effective in-flight* values (propeller vibration dominates the datasheet
    figures), not datasheet values; each preset states its source.

    Attributes:
        acc_density: accelerometer white noise [m/s²/√Hz].
        acc_random_walk: accelerometer bias random walk [m/s³/√Hz].
        acc_initial_bias_std: std of the per-flight initial accelerometer bias [m/s²].
        gyro_density: gyroscope white noise [rad/s/√Hz].
        gyro_random_walk: gyroscope bias random walk [rad/s²/√Hz].
        gyro_initial_bias_std: std of the per-flight initial gyroscope bias [rad/s].
    """

    acc_density: float
    acc_random_walk: float
    acc_initial_bias_std: float
    gyro_density: float
    gyro_random_walk: float
    gyro_initial_bias_std: float

    def as_dict(self) -> dict[str, float]:
        """Plain dict for flight metadata."""
        return {
            "acc_density": self.acc_density,
            "acc_random_walk": self.acc_random_walk,
            "acc_initial_bias_std": self.acc_initial_bias_std,
            "gyro_density": self.gyro_density,
            "gyro_random_walk": self.gyro_random_walk,
            "gyro_initial_bias_std": self.gyro_initial_bias_std,
        }


@dataclass(frozen=True)
class Preset:
    """One simulated platform: vehicle, sensors, rates and the envelope trajectories are drawn from.

    Attributes:
        name: preset key (``nano``, ``racer``, ``rpm``); also the Flight ``platform``.
        description: one line for humans.
        quad_params: rotorpy parameter dict (``Multirotor`` / ``SE3Control`` input).
        rotor_kind: ``"command"`` (log the command through ``pwm_map``) or ``"speed"`` (log measured speed, rad/s).
        pwm_map: speed→command map, required when ``rotor_kind == "command"``.
        rotor_noise_std: white noise added to the logged rotor signal, in its own unit.
        rate_hz: control and sensor rate [Hz]: one controller update and one logged sample per period.
        substeps: fixed RK4 integration steps per control period (integration step = 1/(rate·substeps)).
        imu: IMU noise model.
        speed_range: (min, max) peak trajectory speed [m/s] drawn per flight.
        size_range: (min, max) characteristic trajectory size (radius / half-extent) [m] drawn per flight.
        accel_max: cap on the reference acceleration [m/s²] used to slow a trajectory down.
        altitude: altitude [m] of the trajectory centre (world z, up).
        yaw_modes: yaw references a flight may draw from: ``"wobble"`` (constant + slow sine) or
            ``"tangent"`` (heading along the path).
        yaw_wobble_max: largest yaw wobble amplitude [rad] for ``"wobble"``.
        reference: where the vehicle numbers come from.
    """

    name: str
    description: str
    quad_params: dict[str, Any]
    rotor_kind: str
    pwm_map: PwmMap | None
    rotor_noise_std: float
    rate_hz: float
    substeps: int
    imu: ImuNoise
    speed_range: tuple[float, float]
    size_range: tuple[float, float]
    accel_max: float
    altitude: float
    yaw_modes: tuple[str, ...]
    yaw_wobble_max: float
    reference: str

    def __post_init__(self) -> None:
        if self.rotor_kind not in ROTOR_KINDS:
            raise ValueError(f"preset {self.name!r}: 'rotor_kind' {self.rotor_kind!r} is not one of {ROTOR_KINDS}")
        if self.rotor_kind == ROTOR_COMMAND and self.pwm_map is None:
            raise ValueError(f"preset {self.name!r}: field 'pwm_map' is required for rotor_kind {ROTOR_COMMAND!r}")
        if self.rate_hz <= 0 or self.substeps < 1:
            raise ValueError(f"preset {self.name!r}: fields 'rate_hz'/'substeps' must be positive")
        for mode in self.yaw_modes:
            if mode not in ("wobble", "tangent"):
                raise ValueError(f"preset {self.name!r}: field 'yaw_modes' has unknown mode {mode!r}")

    @property
    def mass(self) -> float:
        """Vehicle mass [kg]."""
        return float(self.quad_params["mass"])

    @property
    def hover_speed(self) -> float:
        """Rotor speed [rad/s] at which the four rotors carry the weight (rotorpy's g = 9.81)."""
        return math.sqrt(self.mass * 9.81 / (self.quad_params["num_rotors"] * self.quad_params["k_eta"]))

    def rotor_signal(self, commanded_speed: np.ndarray, measured_speed: np.ndarray) -> np.ndarray:
        """The logged rotor signal: command through :attr:`pwm_map` or the measured speed [rad/s]."""
        if self.rotor_kind == ROTOR_COMMAND:
            assert self.pwm_map is not None
            return self.pwm_map.to_command(commanded_speed)
        return np.asarray(measured_speed, dtype=np.float64)

    def rotor_speed_from_signal(self, signal: np.ndarray) -> np.ndarray:
        """Rotor speed [rad/s] from a logged signal (steady-state inverse for a command)."""
        if self.rotor_kind == ROTOR_COMMAND:
            assert self.pwm_map is not None
            return self.pwm_map.to_speed(signal)
        return np.asarray(signal, dtype=np.float64)


def _x_layout(arm: float) -> dict[str, np.ndarray]:
    """rotorpy ``rotor_pos`` of an X quadrotor with arm length ``arm`` [m], order :data:`ROTOR_ORDER`."""
    c = math.sqrt(0.5)
    return {
        "r1": arm * np.array([c, c, 0.0]),
        "r2": arm * np.array([c, -c, 0.0]),
        "r3": arm * np.array([-c, -c, 0.0]),
        "r4": arm * np.array([-c, c, 0.0]),
    }


# --------------------------------------------------------------------------------------------- nano
# Forster 2015, "System Identification of the Crazyflie 2.0 Nano Quadrocopter" (the source rotorpy's
# Crazyflie thrust coefficient cites): steady state RPM = 0.2685 · PWM + 4070.3 with PWM ∈ [0, 65535].
_CF_RPM_PER_PWM = 0.2685
_CF_RPM_OFFSET = 4070.3
_CF_PWM_FULL = 65535.0
_CF_OMEGA_AT_ZERO = _CF_RPM_OFFSET * RPM_TO_RAD_PER_S  # ≈ 426 rad/s
_CF_OMEGA_AT_FULL = (_CF_RPM_PER_PWM * _CF_PWM_FULL + _CF_RPM_OFFSET) * RPM_TO_RAD_PER_S  # ≈ 2269 rad/s


def _nano() -> Preset:
    params = copy.deepcopy(_CRAZYFLIE_PARAMS)
    # The physical ceiling is the speed at full PWM, so the PWM map is a bijection on the reachable range
    # (rotorpy's 2500 rad/s would need PWM > 1). Thrust-to-weight stays ≈ 1.6.
    params["rotor_speed_max"] = _CF_OMEGA_AT_FULL
    params["motor_noise_std"] = 0.0  # rotorpy draws it from the global RNG; we add our own seeded noise
    return Preset(
        name="nano",
        description="Crazyflie 2.x class nano quadrotor, commanded PWM, 100 Hz, NanoBench-like speeds (<= 2 m/s)",
        quad_params=params,
        rotor_kind=ROTOR_COMMAND,
        pwm_map=PwmMap(
            omega_at_zero=_CF_OMEGA_AT_ZERO,
            omega_at_full=_CF_OMEGA_AT_FULL,
            reference="Forster 2015 Crazyflie 2.0 system id: RPM = 0.2685*PWM + 4070.3, PWM in [0, 65535]",
        ),
        rotor_noise_std=0.0,
        rate_hz=100.0,
        substeps=1,
        # BMI088 datasheet: 1.7e-3 m/s^2/√Hz and 2.4e-4 rad/s/√Hz; brushed-motor vibration raises the
        # in-flight floor about 6x / 4x (0.1 m/s^2 and 0.01 rad/s per sample at 100 Hz).
        imu=ImuNoise(
            acc_density=1.0e-2,
            acc_random_walk=4.0e-3,
            acc_initial_bias_std=0.05,
            gyro_density=1.0e-3,
            gyro_random_walk=4.0e-5,
            gyro_initial_bias_std=5.0e-3,
        ),
        speed_range=(0.3, 2.0),
        size_range=(0.5, 1.5),
        accel_max=4.0,
        altitude=1.0,
        yaw_modes=("wobble",),
        yaw_wobble_max=math.radians(60.0),
        reference="rotorpy crazyflie_params (Forster 2015; Eschmann et al. 2024)",
    )


# -------------------------------------------------------------------------------------------- racer
_RACER_ARM = 0.11  # m, 220-size X frame with 5-inch propellers
_RACER_OMEGA_MAX = 3600.0  # rad/s, ~34k RPM: 2207-class motor on 6S


def _racer() -> Preset:
    k_eta = 9.0 / _RACER_OMEGA_MAX**2  # 9 N per rotor at full throttle → thrust-to-weight ≈ 6
    params: dict[str, Any] = {
        "mass": 0.60,
        "Ixx": 1.6e-3,
        "Iyy": 1.6e-3,
        "Izz": 2.8e-3,
        "Ixy": 0.0,
        "Iyz": 0.0,
        "Ixz": 0.0,
        "num_rotors": 4,
        "rotor_pos": _x_layout(_RACER_ARM),
        "rotor_directions": np.array([1, -1, 1, -1]),
        "rI": np.zeros(3),
        "c_Dx": 5.0e-3,  # N/(m/s)^2, frame drag: ~2 N at 20 m/s
        "c_Dy": 5.0e-3,
        "c_Dz": 1.0e-2,
        "k_eta": k_eta,
        "k_m": 0.016 * k_eta,  # yaw moment / thrust ≈ 1.6 cm, typical of 5-inch propellers
        "k_d": 2.6e-5,  # rotor drag: 4·k_d·ω_hover/m ≈ 0.25 1/s, as rotorpy's Crazyflie (0.24 1/s)
        "k_z": 2.6e-5,
        "k_h": 0.0,
        "k_flap": 0.0,
        "tau_m": 0.02,
        "rotor_speed_min": 0.0,
        "rotor_speed_max": _RACER_OMEGA_MAX,
        "motor_noise_std": 0.0,
        "k_w": 1,
        "k_v": 10,
        "kp_att": 400.0,
        "kd_att": 45.0,
    }
    return Preset(
        name="racer",
        description="5-inch racing quadrotor, commanded throttle, 200 Hz, TII-RATM-like speeds (up to ~20 m/s)",
        quad_params=params,
        rotor_kind=ROTOR_COMMAND,
        pwm_map=PwmMap(
            omega_at_zero=0.0,
            omega_at_full=_RACER_OMEGA_MAX,
            reference="brushless ESC: steady-state speed ~ proportional to throttle (back-EMF), zero at idle",
        ),
        rotor_noise_std=0.0,
        rate_hz=200.0,
        substeps=1,
        # ICM-20602/BMI270-class racer IMU with soft-mounted FC: ~0.14 m/s^2 and 0.014 rad/s per sample at 200 Hz.
        imu=ImuNoise(
            acc_density=1.0e-2,
            acc_random_walk=4.0e-3,
            acc_initial_bias_std=0.1,
            gyro_density=1.0e-3,
            gyro_random_walk=4.0e-5,
            gyro_initial_bias_std=5.0e-3,
        ),
        speed_range=(6.0, 20.0),
        size_range=(18.0, 40.0),
        accel_max=30.0,
        altitude=10.0,
        yaw_modes=("tangent",),
        yaw_wobble_max=0.0,
        reference="generic 5-inch racer (0.6 kg, 9 N/rotor, tau_m 20 ms); not a system-identified vehicle",
    )


# ---------------------------------------------------------------------------------------------- rpm
_RPM_OMEGA_MAX = 2800.0  # rad/s


def _rpm() -> Preset:
    k_eta = 1.56e-6  # N/(rad/s)^2: hover at ≈ 1090 rad/s, thrust-to-weight ≈ 6.6
    params: dict[str, Any] = {
        "mass": 0.752,
        "Ixx": 2.5e-3,
        "Iyy": 2.1e-3,
        "Izz": 4.3e-3,
        "Ixy": 0.0,
        "Iyz": 0.0,
        "Ixz": 0.0,
        "num_rotors": 4,
        "rotor_pos": {
            "r1": np.array([0.075, 0.10, 0.0]),
            "r2": np.array([0.075, -0.10, 0.0]),
            "r3": np.array([-0.075, -0.10, 0.0]),
            "r4": np.array([-0.075, 0.10, 0.0]),
        },
        "rotor_directions": np.array([1, -1, 1, -1]),
        "rI": np.zeros(3),
        "c_Dx": 6.0e-3,
        "c_Dy": 6.0e-3,
        "c_Dz": 1.0e-2,
        "k_eta": k_eta,
        "k_m": 0.02 * k_eta,
        "k_d": 5.2e-5,  # 4·k_d·ω_hover/m ≈ 0.3 1/s
        "k_z": 5.2e-5,
        "k_h": 0.0,
        "k_flap": 0.0,
        "tau_m": 0.033,
        "rotor_speed_min": 0.0,
        "rotor_speed_max": _RPM_OMEGA_MAX,
        "motor_noise_std": 0.0,
        "k_w": 1,
        "k_v": 10,
        "kp_att": 400.0,
        "kd_att": 45.0,
    }
    return Preset(
        name="rpm",
        description="0.75 kg agile quadrotor with ESC telemetry (rad/s), 200 Hz, NeuroBEM/AI-IO-like speeds",
        quad_params=params,
        rotor_kind=ROTOR_SPEED,
        pwm_map=None,
        rotor_noise_std=5.0,  # rad/s, ESC telemetry jitter (~0.5 % of hover speed)
        rate_hz=200.0,
        substeps=1,
        imu=ImuNoise(
            acc_density=1.0e-2,
            acc_random_walk=4.0e-3,
            acc_initial_bias_std=0.1,
            gyro_density=1.0e-3,
            gyro_random_walk=4.0e-5,
            gyro_initial_bias_std=5.0e-3,
        ),
        speed_range=(1.5, 14.0),
        size_range=(3.0, 12.0),
        accel_max=20.0,
        altitude=3.0,
        yaw_modes=("wobble", "tangent"),
        yaw_wobble_max=math.radians(90.0),
        reference="NeuroBEM/Agilicious-class quadrotor: mass, inertia and rotor layout as published; "
        "aerodynamic coefficients chosen, not identified",
    )


PRESETS: dict[str, Preset] = {p.name: p for p in (_nano(), _racer(), _rpm())}
"""All presets by name."""


def get_preset(preset: str | Preset) -> Preset:
    """Return the preset named ``preset`` (or ``preset`` itself); raise ``KeyError`` naming the options."""
    if isinstance(preset, Preset):
        return preset
    try:
        return PRESETS[preset]
    except KeyError:
        raise KeyError(f"unknown simulator preset {preset!r}; choose one of {sorted(PRESETS)}") from None
