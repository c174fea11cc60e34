"""Reference trajectories of the simulator, drawn per flight from a seed.

Families (:data:`FAMILIES`): circle, figure-8, lemniscate, helix, oval, star, trefoil, random
minimum-snap (rotorpy's ``MinSnap``) and a racing loop. Every reference

* is a rotorpy flat output (dict with ``x, x_dot, x_ddot, x_dddot, x_ddddot, yaw, yaw_dot, yaw_ddot``)
  and is C⁴ (min-snap: C³, its snap steps at the start), so rotorpy's SE3 controller can fly it;
* starts in hover for :data:`HOVER_SECONDS`, then blends into motion over :data:`RAMP_SECONDS`
  (:class:`~velobins_data.sim.timewarp.RampedClock`);
* draws size, peak speed, speed modulation, orientation and yaw behaviour from the preset's envelope,
  with the peak reference acceleration capped at the preset's ``accel_max``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from velobins_data.sim import curves
from velobins_data.sim.presets import Preset
from velobins_data.sim.timewarp import RampedClock, compose, sine_warp

FAMILIES = ("circle", "figure8", "lemniscate", "helix", "oval", "star", "trefoil", "minsnap", "racing")
"""Trajectory families, in the order :func:`velobins_data.sim.batch.simulate_many` cycles through them."""

HOVER_SECONDS = 1.5
"""Hover at the start point before the reference starts moving [s]."""

RAMP_SECONDS = 3.0
"""Duration of the smooth blend from hover into motion [s]."""

_FLAT_KEYS = ("x", "x_dot", "x_ddot", "x_dddot", "x_ddddot")
_MINSNAP_ATTEMPTS = 5


class Trajectory(Protocol):
    """What the flight loop needs from a reference (rotorpy's trajectory interface plus metadata)."""

    family: str
    params: dict[str, Any]

    def update(self, t: float) -> dict[str, Any]:
        """rotorpy flat output at time ``t`` [s]."""
        ...


# ------------------------------------------------------------------------------------------ yaw
class _WobbleYaw:
    """ψ(u) = ψ₀ + A sin(ν u): a constant heading with a slow swing (in ramped-clock time u)."""

    def __init__(self, psi0: float, amplitude: float, nu: float) -> None:
        self.psi0, self.amplitude, self.nu = psi0, amplitude, nu

    def __call__(self, u_derivs: list[float], curve_derivs: np.ndarray, s_derivs: list[float]) -> list[float]:
        u = u_derivs[0]
        a, nu = self.amplitude, self.nu
        c, s = math.cos(nu * u), math.sin(nu * u)
        outer = [self.psi0 + a * s, a * nu * c, -a * nu**2 * s, -a * nu**3 * c, a * nu**4 * s]
        out = compose(outer, u_derivs)
        return [float(out[0]), float(out[1]), float(out[2])]


def _tangent_yaw(u_derivs: list[float], curve_derivs: np.ndarray, s_derivs: list[float]) -> list[float]:
    """Heading along the horizontal tangent of the curve: ψ = atan2(c'_y, c'_x) (defined even at rest)."""
    d1, d2, d3 = curve_derivs[1], curve_derivs[2], curve_derivs[3]
    num = d1[0] * d2[1] - d1[1] * d2[0]
    den = d1[0] ** 2 + d1[1] ** 2
    dnum = d1[0] * d3[1] - d1[1] * d3[0]
    dden = 2.0 * (d1[0] * d2[0] + d1[1] * d2[1])
    psi_s = num / den
    psi_ss = (dnum * den - num * dden) / den**2
    sd1, sd2 = s_derivs[1], s_derivs[2]
    return [math.atan2(d1[1], d1[0]), psi_s * sd1, psi_ss * sd1**2 + psi_s * sd2]


# ---------------------------------------------------------------------------------- periodic curves
class CurveTrajectory:
    """A closed curve flown with a ramped, speed-modulated phase: x(t) = c(s(u(t))).

    Attributes:
        family: trajectory family name.
        params: drawn parameters (for the flight metadata).
    """

    def __init__(
        self,
        family: str,
        curve: curves.FourierCurve,
        omega: float,
        depth: float,
        nu: float,
        yaw: Callable[[list[float], np.ndarray, list[float]], list[float]],
        params: dict[str, Any],
    ) -> None:
        self.family = family
        self.curve = curve
        self.omega, self.depth, self.nu = omega, depth, nu
        self.clock = RampedClock(HOVER_SECONDS, RAMP_SECONDS)
        self.yaw = yaw
        self.params = params

    def update(self, t: float) -> dict[str, Any]:
        """rotorpy flat output at time ``t`` [s]."""
        u = self.clock(t)
        s = compose(sine_warp(u[0], self.omega, self.depth, self.nu), u)
        c = self.curve.derivatives(float(s[0]))
        x = compose(list(c), [float(v) for v in s])
        yaw, yaw_dot, yaw_ddot = self.yaw(u, c, [float(v) for v in s])
        out: dict[str, Any] = {key: np.asarray(val, dtype=np.float64) for key, val in zip(_FLAT_KEYS, x, strict=True)}
        out.update(yaw=yaw, yaw_dot=yaw_dot, yaw_ddot=yaw_ddot)
        return out


def _phase_rate(c1: float, c2: float, speed: float, accel: float, depth: float, nu: float) -> float:
    """Largest mean phase rate ω [rad/s] keeping peak speed ≤ ``speed`` and peak acceleration ≤ ``accel``.

    With s' = ω(1 + m cos νu) and s'' = -ω m ν sin νu: ‖ẋ‖ ≤ ω(1+m)·C1 and
    ‖ẍ‖ ≤ ω²(1+m)²·C2 + ω m ν·C1, where C1 = max‖c'‖, C2 = max‖c''‖.
    """
    w_speed = speed / ((1.0 + depth) * c1)
    qa = (1.0 + depth) ** 2 * c2
    qb = depth * nu * c1
    w_acc = (-qb + math.sqrt(qb * qb + 4.0 * qa * accel)) / (2.0 * qa)
    return min(w_speed, w_acc)


def _unit_curve(
    family: str, rng: np.random.Generator, preset: Preset, size: float
) -> tuple[Callable[[np.ndarray], np.ndarray], dict[str, Any], float | None]:
    """The unit curve of ``family`` with its drawn shape parameters and Fourier taper."""
    z_room = 0.6 * preset.altitude / size  # keep the vehicle well above the ground, in unit-curve units
    if family == "circle":
        return curves.circle, {}, None
    if family == "figure8":
        return curves.figure8, {}, None
    if family == "lemniscate":
        return curves.lemniscate, {}, None
    if family == "helix":
        turns = int(rng.integers(2, 5))
        height = float(min(rng.uniform(0.4, 1.0), 2.0 * z_room))
        return curves.helix(turns, height), {"turns": turns, "height": height * size}, None
    if family == "oval":
        aspect = float(rng.uniform(0.35, 0.7))
        return curves.oval(aspect), {"aspect": aspect}, None
    if family == "star":
        points = int(rng.integers(4, 7))
        depth = float(rng.uniform(0.15, 0.3))
        return curves.star(points, depth), {"points": points, "depth": depth}, None
    if family == "trefoil":
        zscale = float(min(1.0, 3.0 * z_room))

        def trefoil(s: np.ndarray) -> np.ndarray:
            return curves.trefoil(s) * np.array([1.0, 1.0, zscale])

        return trefoil, {"z_scale": zscale}, None
    if family == "racing":
        straight = float(rng.uniform(1.0, 2.5))
        return curves.racing_loop(straight), {"straight": straight}, 10.0
    raise KeyError(f"unknown trajectory family {family!r}; choose one of {FAMILIES}")


def _curve_trajectory(family: str, preset: Preset, rng: np.random.Generator) -> CurveTrajectory:
    size = float(rng.uniform(*preset.size_range))
    speed = float(rng.uniform(*preset.speed_range))
    unit, shape, taper = _unit_curve(family, rng, preset, size)
    planar = family in ("circle", "figure8", "lemniscate", "oval", "star", "racing")
    z_amp = float(rng.uniform(0.0, min(0.3 * size, 0.4 * preset.altitude))) if planar else 0.0
    z_harm = int(rng.integers(1, 3))
    z_phase = float(rng.uniform(0.0, 2.0 * math.pi))
    heading = float(rng.uniform(-math.pi, math.pi))
    mirror = bool(rng.integers(0, 2))
    cz, sz = math.cos(heading), math.sin(heading)
    rot = np.array([[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]])
    flip = np.diag([1.0, -1.0 if mirror else 1.0, 1.0])
    centre = np.array([0.0, 0.0, preset.altitude])

    def placed(s: np.ndarray) -> np.ndarray:
        pts = unit(s) @ flip.T @ rot.T * size + centre
        pts[:, 2] += z_amp * np.sin(z_harm * s + z_phase)
        return pts

    curve = curves.FourierCurve.fit(placed, taper=taper)
    depth = float(rng.uniform(0.0, 0.3))
    nu = 2.0 * math.pi / float(rng.uniform(8.0, 20.0))
    omega = _phase_rate(curve.max_norm(1), curve.max_norm(2), speed, preset.accel_max, depth, nu)
    mode = str(rng.choice(preset.yaw_modes))
    if mode == "tangent":
        yaw = _tangent_yaw
    else:
        amplitude = float(rng.uniform(0.0, preset.yaw_wobble_max))
        period = float(rng.uniform(6.0, 15.0))
        yaw = _WobbleYaw(float(rng.uniform(-math.pi, math.pi)), amplitude, 2.0 * math.pi / period)
    params = {
        "size": size,
        "speed_target": speed,
        "phase_rate": omega,
        "speed_modulation": depth,
        "z_amplitude": z_amp,
        "heading": heading,
        "mirror": mirror,
        "yaw_mode": mode,
        **shape,
    }
    return CurveTrajectory(family, curve, omega, depth, nu, yaw, params)


# -------------------------------------------------------------------------------------- min-snap
class MinSnapTrajectory:
    """rotorpy ``MinSnap`` through random waypoints, delayed by the hover and slowed to the preset's envelope.

    The polynomial starts at rest with zero acceleration and jerk, so it needs no extra ramp. The time
    scale κ ≤ 1 (reference evaluated at κ·t, derivative n multiplied by κⁿ) enforces the peak speed and
    acceleration, which rotorpy's QP only constrains at segment midpoints.
    """

    def __init__(self, inner: Any, kappa: float, params: dict[str, Any]) -> None:
        self.family = "minsnap"
        self.inner = inner
        self.kappa = kappa
        self.params = params

    def update(self, t: float) -> dict[str, Any]:
        """rotorpy flat output at time ``t`` [s]."""
        k = self.kappa
        flat = self.inner.update(max(0.0, t - HOVER_SECONDS) * k)
        out: dict[str, Any] = {key: np.asarray(flat[key], dtype=np.float64) * k**n for n, key in enumerate(_FLAT_KEYS)}
        out["yaw"] = float(flat["yaw"])
        out["yaw_dot"] = float(flat["yaw_dot"]) * k
        out["yaw_ddot"] = float(flat["yaw_ddot"]) * k * k
        return out


def _random_waypoints(preset: Preset, rng: np.random.Generator, size: float, length: float) -> np.ndarray:
    """Waypoints from the start point, each at least ``size/2`` from the previous, until ``length`` is covered."""
    dz = min(0.2 * size, 0.25 * preset.altitude)  # the polynomial overshoots its waypoints
    points = [np.array([0.0, 0.0, preset.altitude])]
    covered = 0.0
    while covered < length or len(points) < 3:
        for _ in range(100):
            xy = rng.uniform(-size, size, size=2)
            cand = np.array([xy[0], xy[1], preset.altitude + rng.uniform(-dz, dz)])
            if np.linalg.norm(cand - points[-1]) > 0.5 * size:
                break
        covered += float(np.linalg.norm(cand - points[-1]))
        points.append(cand)
    return np.array(points)


def _minsnap_trajectory(preset: Preset, rng: np.random.Generator, seconds: float) -> MinSnapTrajectory:
    from rotorpy.trajectories.minsnap import MinSnap

    size = float(rng.uniform(*preset.size_range))
    speed = float(rng.uniform(*preset.speed_range))
    v_avg = 0.8 * speed
    mode = str(rng.choice(preset.yaw_modes))
    for _attempt in range(_MINSNAP_ATTEMPTS):
        pts = _random_waypoints(preset, rng, size, (seconds - HOVER_SECONDS + 2.0) * v_avg)
        if mode == "tangent":
            step = np.diff(pts[:, :2], axis=0)
            yaw = np.unwrap(np.concatenate([np.arctan2(step[:1, 1], step[:1, 0]), np.arctan2(step[:, 1], step[:, 0])]))
        else:
            swing = rng.uniform(-0.5, 0.5, size=len(pts)) * preset.yaw_wobble_max
            limit = preset.yaw_wobble_max
            yaw = float(rng.uniform(-math.pi, math.pi)) + np.clip(np.cumsum(swing), -limit, limit)
        try:
            # v_max only bounds segment midpoints; the time scale below enforces the real envelope.
            inner = MinSnap(pts, yaw_angles=yaw, v_max=2.0 * speed, v_avg=v_avg, verbose=False)
        except (TypeError, ValueError, ArithmeticError):  # cvxopt found no solution: rotorpy indexes None
            continue
        if not inner.null:
            break
    else:
        raise RuntimeError(f"rotorpy MinSnap found no solution in {_MINSNAP_ATTEMPTS} random waypoint sets")
    # Peak speed and acceleration of the unscaled polynomial, sampled at 50 Hz.
    total = float(inner.t_keyframes[-1])
    ts = np.linspace(0.0, total, max(2, int(total * 50)))
    flats = [inner.update(t) for t in ts]
    v_peak = max(float(np.linalg.norm(f["x_dot"])) for f in flats)
    a_peak = max(float(np.linalg.norm(f["x_ddot"])) for f in flats)
    kappa = min(1.0, speed / max(v_peak, 1e-9), math.sqrt(preset.accel_max / max(a_peak, 1e-9)))
    params = {
        "size": size,
        "speed_target": speed,
        "waypoints": len(pts),
        "time_scale": kappa,
        "yaw_mode": mode,
    }
    return MinSnapTrajectory(inner, kappa, params)


def make_trajectory(family: str, preset: Preset, rng: np.random.Generator, seconds: float) -> Trajectory:
    """Draw a reference of ``family`` for ``preset`` lasting at least ``seconds`` (curves are endless)."""
    if family not in FAMILIES:
        raise KeyError(f"unknown trajectory family {family!r}; choose one of {FAMILIES}")
    if family == "minsnap":
        return _minsnap_trajectory(preset, rng, seconds)
    return _curve_trajectory(family, preset, rng)
