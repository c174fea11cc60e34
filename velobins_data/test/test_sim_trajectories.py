"""Reference trajectories: smooth time warps, Fourier curves and every family's flat outputs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from velobins_data.sim.curves import FourierCurve, circle, racing_loop
from velobins_data.sim.presets import get_preset
from velobins_data.sim.timewarp import RampedClock, compose, sine_warp, smoothstep7
from velobins_data.sim.trajectories import FAMILIES, HOVER_SECONDS, RAMP_SECONDS, make_trajectory

_KEYS = ("x", "x_dot", "x_ddot", "x_dddot", "x_ddddot")


def _fd(fn, t: float, h: float = 1e-4) -> np.ndarray:
    """Central finite difference of ``fn`` at ``t``."""
    return (np.asarray(fn(t + h)) - np.asarray(fn(t - h))) / (2.0 * h)


def test_compose_matches_finite_differences() -> None:
    # h(t) = sin(g(t)) with g(t) = t^3 + 0.5 t: derivatives from compose vs numerical differentiation.
    def g_derivs(t: float) -> list[float]:
        return [t**3 + 0.5 * t, 3 * t**2 + 0.5, 6 * t, 6.0, 0.0]

    def h_derivs(t: float) -> list[np.ndarray]:
        g0 = g_derivs(t)[0]
        outer = [math.sin(g0), math.cos(g0), -math.sin(g0), -math.cos(g0), math.sin(g0)]
        return compose(outer, g_derivs(t))

    t = 0.7
    derivs = h_derivs(t)
    for order in range(4):
        numeric = _fd(lambda tt, o=order: h_derivs(tt)[o], t)
        assert numeric == pytest.approx(float(derivs[order + 1]), rel=1e-5, abs=1e-6)


def test_smoothstep_and_ramped_clock_are_smooth() -> None:
    assert smoothstep7(0.0) == [0.0, 0.0, 0.0, 0.0]
    assert smoothstep7(1.0)[0] == 1.0
    for x in (0.2, 0.5, 0.9):
        vals = smoothstep7(x)
        for order in range(3):
            numeric = _fd(lambda xx, o=order: smoothstep7(xx)[o], x, 1e-6)
            assert numeric == pytest.approx(vals[order + 1], rel=1e-5, abs=1e-6)

    clock = RampedClock(hover=1.5, ramp=3.0)
    assert clock(1.0) == [0.0] * 5
    after = clock(10.0)
    assert after[0] == pytest.approx(10.0 - 1.5 - 1.5)  # u = t - hover - ramp/2
    assert after[1] == 1.0
    # The clock and its derivatives are continuous at both ends of the ramp and consistent inside it.
    for edge in (1.5, 4.5):
        left, right = clock(edge - 1e-9), clock(edge + 1e-9)
        assert np.allclose(left, right, atol=1e-6)
    for t in (2.0, 3.1, 4.2):
        vals = clock(t)
        for order in range(4):
            assert _fd(lambda tt, o=order: clock(tt)[o], t, 1e-5) == pytest.approx(vals[order + 1], rel=1e-4, abs=1e-7)


def test_sine_warp_derivatives() -> None:
    vals = sine_warp(2.0, omega=0.7, depth=0.25, nu=0.9)
    for order in range(4):
        numeric = _fd(lambda u, o=order: sine_warp(u, 0.7, 0.25, 0.9)[o], 2.0, 1e-5)
        assert numeric == pytest.approx(vals[order + 1], rel=1e-5, abs=1e-8)


def test_fourier_curve_is_exact_for_a_circle_and_smooth_for_the_racing_loop() -> None:
    curve = FourierCurve.fit(circle, harmonics=8)
    s = 0.37
    d = curve.derivatives(s)
    assert d[0] == pytest.approx([math.cos(s), math.sin(s), 0.0], abs=1e-12)
    assert d[1] == pytest.approx([-math.sin(s), math.cos(s), 0.0], abs=1e-12)
    assert d[4] == pytest.approx([math.cos(s), math.sin(s), 0.0], abs=1e-12)
    # The stadium has a curvature step; the tapered fit stays close to it and its 2nd derivative is bounded.
    track = racing_loop(1.5)
    fit = FourierCurve.fit(track, taper=10.0)
    ss = np.linspace(0.0, 2.0 * math.pi, 400, endpoint=False)
    assert np.abs(fit.sample(ss) - track(ss)).max() < 0.03
    assert fit.max_norm(2) < 3.0 * fit.max_norm(1) ** 2


@pytest.mark.parametrize("family", FAMILIES)
def test_family_is_a_smooth_flyable_reference(family: str) -> None:
    preset = get_preset("nano")
    traj = make_trajectory(family, preset, np.random.default_rng(11), 30.0)
    start = traj.update(0.0)
    # Starts at rest and holds the start point through the hover (min-snap starts with a snap step only).
    for key in _KEYS[1:4] if family == "minsnap" else _KEYS[1:]:
        assert np.allclose(start[key], 0.0, atol=1e-9), key
    assert np.allclose(traj.update(0.9 * HOVER_SECONDS)["x"], start["x"])
    assert start["x"][2] > 0.3  # above the ground
    # Each output is the derivative of the previous one (C^4 reference), also during the ramp.
    for t in (HOVER_SECONDS + 0.4 * RAMP_SECONDS, 9.3, 21.7):
        flat = traj.update(t)
        for low, high in itertools.pairwise(_KEYS):
            numeric = _fd(lambda tt, k=low: traj.update(tt)[k], t, 1e-4)
            scale = max(1.0, float(np.abs(flat[high]).max()))
            assert np.allclose(numeric, flat[high], atol=2e-4 * scale), (family, t, high)
        dyaw = _fd(lambda tt: math.sin(traj.update(tt)["yaw"]), t, 1e-4)
        assert dyaw == pytest.approx(math.cos(flat["yaw"]) * flat["yaw_dot"], abs=1e-5)
    # Stays inside the preset's envelope.
    ts = np.arange(0.0, 30.0, 0.05)
    flats = [traj.update(t) for t in ts]
    speed = max(float(np.linalg.norm(f["x_dot"])) for f in flats)
    accel = max(float(np.linalg.norm(f["x_ddot"])) for f in flats)
    assert speed <= 1.02 * traj.params["speed_target"]
    assert accel <= 1.05 * preset.accel_max
    assert speed > 0.1  # it does move
    assert min(f["x"][2] for f in flats) > 0.2


def test_trajectories_are_reproducible_from_the_seed() -> None:
    preset = get_preset("racer")
    a = make_trajectory("star", preset, np.random.default_rng(5), 20.0)
    b = make_trajectory("star", preset, np.random.default_rng(5), 20.0)
    c = make_trajectory("star", preset, np.random.default_rng(6), 20.0)
    assert a.params == b.params
    assert np.array_equal(a.update(12.3)["x"], b.update(12.3)["x"])
    assert not np.allclose(a.update(12.3)["x"], c.update(12.3)["x"])
    # Racer yaw follows the path: heading = direction of the horizontal velocity once moving.
    flat = a.update(12.3)
    assert math.atan2(flat["x_dot"][1], flat["x_dot"][0]) == pytest.approx(flat["yaw"], abs=1e-6)


def test_unknown_family_names_the_choices() -> None:
    with pytest.raises(KeyError, match="circle"):
        make_trajectory("spiral", get_preset("nano"), np.random.default_rng(0), 10.0)
