"""Fly one simulated flight with rotorpy and return it as a :class:`~velobins_data.flight.Flight`.

The physics is rotorpy's ``Multirotor`` (``aero=True``: rotor drag, induced inflow and frame drag;
first-order motor lag; rigid-body dynamics) and the controller is rotorpy's ``SE3Control`` flying a
reference from :mod:`velobins_data.sim.trajectories`. Control runs at the preset's rate with the motor
command held in between (zero-order hold).

Integration: by default a fixed-step classical Runge-Kutta 4 over rotorpy's own state derivative
``Multirotor._s_dot_fn`` (same clipping of the command and quaternion renormalisation as
``Multirotor.step``). ``Multirotor.step`` calls ``scipy.integrate.solve_ivp`` every control period,
whose set-up cost about doubles the wall time; ``integrator="rotorpy"`` uses it anyway, for cross-checks.

Conventions (rotorpy already matches the Flight boundary, checked in the tests): world z up
(gravity (0, 0, -g)), body FLU (thrust along +z, rotor 1 front-left), ``q`` body→world (x, y, z, w).
The accelerometer reads the specific force f = Rᵀ(v̇ - g_w) = (thrust + rotor drag + frame drag)/m,
so a hovering vehicle reads (0, 0, +g).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
from rotorpy.controllers.quadrotor_control import SE3Control
from rotorpy.vehicles.multirotor import Multirotor
from scipy.spatial.transform import Rotation

from velobins_common.constants import ROTOR_COMMAND
from velobins_data.flight import Flight
from velobins_data.sim.imu import draw_imu_errors
from velobins_data.sim.presets import ROTOR_ORDER, Preset, get_preset
from velobins_data.sim.trajectories import FAMILIES, Trajectory, make_trajectory

INTEGRATORS = ("rk4", "rotorpy")
"""Choices for the ``integrator`` argument."""

MAX_SPEED = 100.0
"""A flight whose speed exceeds this [m/s] has diverged (rotorpy's own OVER_SPEED limit)."""

MAX_BODY_RATE = 100.0
"""A flight whose body rate exceeds this [rad/s] has diverged (rotorpy's own OVER_SPIN limit)."""

_STREAMS = ("trajectory", "imu", "rotor")


class SimulationError(RuntimeError):
    """A simulated flight diverged or could not be set up; the message names the flight."""


@dataclass
class FlightLog:
    """Noise-free record of one flight at the control rate (index k ↔ time k/rate).

    Attributes:
        t: (T,) time [s].
        p, v: (T, 3) world position [m] and velocity [m/s].
        q: (T, 4) body→world quaternion (x, y, z, w).
        w: (T, 3) body angular rate [rad/s].
        specific_force: (T, 3) body specific force [m/s²] (what an ideal accelerometer reads).
        rotor_speed: (T, K) actual rotor speed [rad/s] (rotorpy state).
        rotor_command: (T, K) commanded rotor speed [rad/s] after clipping to the motor range.
        reference: (T, 3) reference position [m].
        gravity: gravity magnitude used by rotorpy [m/s²].
    """

    t: np.ndarray
    p: np.ndarray
    v: np.ndarray
    q: np.ndarray
    w: np.ndarray
    specific_force: np.ndarray
    rotor_speed: np.ndarray
    rotor_command: np.ndarray
    reference: np.ndarray
    gravity: float


def _initial_state(preset: Preset, flat0: dict[str, Any]) -> dict[str, np.ndarray]:
    """Hover at the reference's start point and heading, rotors at hover speed."""
    k = int(preset.quad_params["num_rotors"])
    return {
        "x": np.asarray(flat0["x"], dtype=np.float64).copy(),
        "v": np.zeros(3),
        "q": Rotation.from_euler("z", float(flat0["yaw"])).as_quat(),
        "w": np.zeros(3),
        "wind": np.zeros(3),
        "rotor_speeds": np.full(k, preset.hover_speed),
    }


def fly(preset: str | Preset, trajectory: Trajectory, seconds: float, integrator: str = "rk4") -> FlightLog:
    """Fly ``trajectory`` for ``seconds`` with the SE3 controller; return the noise-free log.

    Raises:
        SimulationError: the state became non-finite or exceeded :data:`MAX_SPEED` / :data:`MAX_BODY_RATE`.
    """
    preset = get_preset(preset)
    if integrator not in INTEGRATORS:
        raise ValueError(f"fly: integrator must be one of {INTEGRATORS}, got {integrator!r}")
    if seconds <= 0:
        raise ValueError(f"fly: seconds must be positive, got {seconds}")
    dt = 1.0 / preset.rate_hz
    n = round(seconds * preset.rate_hz) + 1
    h = dt / preset.substeps
    k_rot = int(preset.quad_params["num_rotors"])

    state0 = _initial_state(preset, trajectory.update(0.0))
    vehicle = Multirotor(preset.quad_params, initial_state=state0, control_abstraction="cmd_motor_speeds", aero=True)
    controller = SE3Control(preset.quad_params)
    g_world = np.array([0.0, 0.0, vehicle.g])
    lo, hi = vehicle.rotor_speed_min, vehicle.rotor_speed_max

    log = {
        name: np.empty((n, width))
        for name, width in (("p", 3), ("v", 3), ("q", 4), ("w", 3), ("f", 3), ("rs", k_rot), ("rc", k_rot), ("ref", 3))
    }
    x = Multirotor._pack_state(state0)
    for i in range(n):
        t = i * dt
        state = Multirotor._unpack_state(x)
        flat = trajectory.update(t)
        control = controller.update(t, state, flat)
        cmd = np.clip(vehicle.get_cmd_motor_speeds(state, control), lo, hi)
        k1 = vehicle._s_dot_fn(t, x, cmd)
        rot = Rotation.from_quat(x[6:10]).as_matrix()
        log["p"][i], log["v"][i], log["q"][i], log["w"][i] = x[0:3], x[3:6], x[6:10], x[10:13]
        log["f"][i] = rot.T @ (k1[3:6] + g_world)
        log["rs"][i], log["rc"][i], log["ref"][i] = x[16:], cmd, flat["x"]
        if i == n - 1:
            break
        if integrator == "rk4":
            for j in range(preset.substeps):
                kk = k1 if j == 0 else vehicle._s_dot_fn(t, x, cmd)
                k2 = vehicle._s_dot_fn(t, x + 0.5 * h * kk, cmd)
                k3 = vehicle._s_dot_fn(t, x + 0.5 * h * k2, cmd)
                k4 = vehicle._s_dot_fn(t, x + h * k3, cmd)
                x = x + (h / 6.0) * (kk + 2.0 * k2 + 2.0 * k3 + k4)
                x[6:10] /= np.linalg.norm(x[6:10])
                x[16:] = np.clip(x[16:], lo, hi)
        else:
            x = Multirotor._pack_state(vehicle.step(Multirotor._unpack_state(x.copy()), control, dt))
        if not np.isfinite(x).all():
            raise SimulationError(f"flight diverged at t = {t:.2f} s: non-finite state")
        if np.linalg.norm(x[3:6]) > MAX_SPEED or np.linalg.norm(x[10:13]) > MAX_BODY_RATE:
            raise SimulationError(
                f"flight diverged at t = {t:.2f} s: speed {np.linalg.norm(x[3:6]):.1f} m/s, "
                f"body rate {np.linalg.norm(x[10:13]):.1f} rad/s"
            )
    return FlightLog(
        t=np.arange(n) * dt,
        p=log["p"],
        v=log["v"],
        q=log["q"],
        w=log["w"],
        specific_force=log["f"],
        rotor_speed=log["rs"],
        rotor_command=log["rc"],
        reference=log["ref"],
        gravity=float(vehicle.g),
    )


def flight_name(family: str, index: int) -> str:
    """Flight name of flight ``index`` of ``family``: ``sim_<family>_<index:03d>``."""
    return f"sim_{family}_{index:03d}"


def _rotorpy_version() -> str:
    try:
        return version("rotorpy")
    except PackageNotFoundError:  # pragma: no cover - rotorpy imported from a source tree
        return "unknown"


def simulate_flight(
    preset: str | Preset,
    family: str,
    seconds: float,
    seed: int,
    *,
    index: int = 0,
    noise: bool = True,
    integrator: str = "rk4",
) -> Flight:
    """Simulate one flight of ``family`` on ``preset`` and return it as a validated Flight.

    Everything random (trajectory, IMU errors, rotor-signal noise) comes from ``seed`` through
    independent ``numpy.random.SeedSequence`` streams, so a flight is reproducible in any process.

    Args:
        preset: preset name (``nano``, ``racer``, ``rpm``) or a :class:`~velobins_data.sim.presets.Preset`.
        family: one of :data:`~velobins_data.sim.trajectories.FAMILIES`.
        seconds: flight duration [s] (including the initial hover and ramp-in).
        seed: seed of this flight.
        index: flight number used in the name (``sim_<family>_<index:03d>``).
        noise: add IMU noise and biases and rotor-signal noise (``False`` gives the ideal sensors).
        integrator: ``"rk4"`` (fixed step, default) or ``"rotorpy"`` (``Multirotor.step``).

    Raises:
        KeyError: unknown preset or family.
        SimulationError: the flight diverged (message names the flight).
    """
    preset = get_preset(preset)
    if family not in FAMILIES:
        raise KeyError(f"unknown trajectory family {family!r}; choose one of {FAMILIES}")
    name = flight_name(family, index)
    streams = dict(zip(_STREAMS, np.random.SeedSequence(seed).spawn(len(_STREAMS)), strict=True))
    rngs = {key: np.random.default_rng(ss) for key, ss in streams.items()}
    try:
        trajectory = make_trajectory(family, preset, rngs["trajectory"], seconds)
        log = fly(preset, trajectory, seconds, integrator=integrator)
    except SimulationError as exc:
        raise SimulationError(f"{name} (preset {preset.name}, seed {seed}): {exc}") from exc

    n = log.t.shape[0]
    acc, gyro = log.specific_force.copy(), log.w.copy()
    rotor = preset.rotor_signal(log.rotor_command, log.rotor_speed)
    if noise:
        err = draw_imu_errors(preset.imu, n, preset.rate_hz, rngs["imu"])
        acc += err.acc_bias + err.acc_noise
        gyro += err.gyro_bias + err.gyro_noise
        if preset.rotor_noise_std > 0.0:
            rotor = rotor + rngs["rotor"].normal(0.0, preset.rotor_noise_std, size=rotor.shape)
            rotor = np.clip(rotor, 0.0, 1.0) if preset.rotor_kind == ROTOR_COMMAND else np.maximum(rotor, 0.0)

    tracking = np.linalg.norm(log.p - log.reference, axis=1)
    metadata: dict[str, Any] = {
        "dataset": "sim",
        "platform": f"sim_{preset.name}",
        "source": f"rotorpy:{preset.name}/{family}/seed={seed}",
        "gravity": log.gravity,
        "preset": preset.name,
        "family": family,
        "seed": int(seed),
        "index": int(index),
        "rate_hz": preset.rate_hz,
        "noise": bool(noise),
        "integrator": integrator,
        "simulator": f"rotorpy {_rotorpy_version()}",
        "rotor_order": list(ROTOR_ORDER),
        "rotor_map": preset.pwm_map.reference if preset.pwm_map is not None else "measured rotor speed [rad/s]",
        "imu_noise": preset.imu.as_dict(),
        "trajectory": dict(trajectory.params),
        "tracking_rms": float(math.sqrt(float(np.mean(tracking**2)))),
        "max_speed": float(np.linalg.norm(log.v, axis=1).max()),
    }
    return Flight(
        name=name,
        t=log.t,
        acc=acc,
        gyro=gyro,
        rotor=rotor,
        rotor_kind=preset.rotor_kind,
        p=log.p,
        q=log.q,
        v=log.v,
        metadata=metadata,
    )
