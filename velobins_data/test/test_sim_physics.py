"""Physics and conventions of simulated flights (rotorpy underneath, Flight conventions on top).

The central check: on a nano flight the body-horizontal specific force tracks the rotor-drag term
f_xy ≈ -(k_d/m)·(Σ ω_i)·v_body,xy — the effect that makes body velocity observable from IMU + rotors.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_data.flight import Flight
from velobins_data.sim import SimulationError, get_preset, simulate_flight
from velobins_data.sim.flight import fly
from velobins_data.sim.imu import draw_imu_errors
from velobins_data.sim.presets import PRESETS, PwmMap
from velobins_data.sim.trajectories import HOVER_SECONDS, make_trajectory

_NANO = get_preset("nano")
_SECONDS = 30.0


@pytest.fixture(scope="module")
def nano_noisy() -> Flight:
    return simulate_flight("nano", "figure8", _SECONDS, seed=11, index=3)


@pytest.fixture(scope="module")
def nano_clean() -> Flight:
    return simulate_flight("nano", "figure8", _SECONDS, seed=11, index=3, noise=False)


def _rotor_drag_fit(flight: Flight, window: int) -> list[tuple[float, float]]:
    """Per horizontal axis: (slope, R²) of f_axis ~ slope·(-(Σω)·v_body,axis) + c over ``window``-sample means."""
    omega_sum = _NANO.rotor_speed_from_signal(flight.rotor).sum(axis=1)
    vb = flight.body_velocity()
    n = len(flight) // window * window
    out = []
    for axis in (0, 1):
        x = (-omega_sum * vb[:, axis])[:n].reshape(-1, window).mean(axis=1)
        y = flight.acc[:n, axis].reshape(-1, window).mean(axis=1)
        design = np.stack([x, np.ones_like(x)], axis=1)
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        r2 = 1.0 - np.sum((y - design @ coef) ** 2) / np.sum((y - y.mean()) ** 2)
        out.append((float(coef[0]), float(r2)))
    return out


def test_body_horizontal_specific_force_tracks_rotor_drag(nano_noisy: Flight, nano_clean: Flight) -> None:
    expected = _NANO.quad_params["k_d"] / _NANO.mass  # rotorpy: H_i = -k_d ω_i v_local,i
    # Ideal sensors: the rotor-drag term explains nearly all of the body-horizontal specific force.
    for slope, r2 in _rotor_drag_fit(nano_clean, window=1):
        assert slope == pytest.approx(expected, rel=0.02)
        assert r2 > 0.99
    # With the nano's IMU noise and bias, 0.1 s means still show the same law with the right sign.
    for slope, r2 in _rotor_drag_fit(nano_noisy, window=10):
        assert slope == pytest.approx(expected, rel=0.1)
        assert r2 > 0.8


def test_hover_reads_plus_g_on_body_z(nano_noisy: Flight, nano_clean: Flight) -> None:
    hover = nano_clean.t < HOVER_SECONDS - 0.1
    g = nano_clean.gravity
    assert g == pytest.approx(9.81)  # rotorpy's gravity, recorded in the metadata
    assert np.allclose(nano_clean.acc[hover], [0.0, 0.0, g], atol=1e-9)
    assert np.allclose(nano_clean.gyro[hover], 0.0, atol=1e-9)
    assert np.allclose(nano_clean.v[hover], 0.0, atol=1e-9)
    # Noisy: the mean over the hover is +g on z up to the drawn bias (std 0.05 m/s^2 per axis).
    mean = nano_noisy.acc[hover].mean(axis=0)
    assert mean == pytest.approx([0.0, 0.0, g], abs=0.25)
    assert nano_noisy.acc[hover].std(axis=0) == pytest.approx([0.1, 0.1, 0.1], rel=0.3)  # 1e-2 m/s^2/√Hz · √100


def test_ground_truth_is_kinematically_consistent(nano_clean: Flight) -> None:
    flight = nano_clean
    dt = 1.0 / flight.rate_hz
    # velocity = d/dt position
    dp = (flight.p[2:] - flight.p[:-2]) / (2.0 * dt)
    assert np.abs(dp - flight.v[1:-1]).max() < 1e-3
    # world acceleration = R·f + g_world (f = specific force in body FLU, world z up)
    rot = Rotation.from_quat(flight.q)
    acc_world = rot.apply(flight.acc) - np.array([0.0, 0.0, flight.gravity])
    dv = (flight.v[2:] - flight.v[:-2]) / (2.0 * dt)
    assert np.abs(dv - acc_world[1:-1]).max() < 0.01
    assert np.abs(acc_world).max() > 1.0  # the flight does accelerate
    # gyro = body-frame rate: R_k^T R_{k+1} = exp(ω dt) with ω averaged over the step
    rel = (rot[:-1].inv() * rot[1:]).as_rotvec() / dt
    mid = 0.5 * (flight.gyro[:-1] + flight.gyro[1:])
    assert np.abs(rel - mid).max() < 1e-3
    assert np.abs(flight.gyro).max() > 0.3


def test_sequence_contract_and_metadata(nano_noisy: Flight) -> None:
    flight = nano_noisy
    assert flight.name == "sim_figure8_003"
    assert flight.rotor_kind == "command" and flight.num_rotors == 4
    assert flight.rate_hz == pytest.approx(100.0)
    assert flight.duration == pytest.approx(_SECONDS)
    assert 0.0 <= flight.rotor.min() and flight.rotor.max() <= 1.0
    hover_pwm = float(_NANO.pwm_map.to_command(_NANO.hover_speed))
    assert np.allclose(flight.rotor[0], hover_pwm)
    meta = flight.metadata
    assert meta["dataset"] == "sim" and meta["platform"] == "sim_nano" and meta["family"] == "figure8"
    assert meta["tracking_rms"] < 0.1  # the SE3 controller follows the reference
    assert 0.2 < meta["max_speed"] <= 2.2


def test_same_seed_same_flight_different_seed_different() -> None:
    a = simulate_flight("nano", "circle", 3.0, seed=1)
    b = simulate_flight("nano", "circle", 3.0, seed=1)
    c = simulate_flight("nano", "circle", 3.0, seed=2)
    for field in ("acc", "gyro", "rotor", "p", "q", "v"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert not np.allclose(a.acc, c.acc)


def test_rk4_matches_rotorpy_solve_ivp_integration() -> None:
    traj = make_trajectory("star", _NANO, np.random.default_rng(2), 8.0)
    ours = fly(_NANO, traj, 8.0, integrator="rk4")
    ref = fly(_NANO, traj, 8.0, integrator="rotorpy")
    assert np.abs(ours.p - ref.p).max() < 2e-3
    assert np.abs(ours.v - ref.v).max() < 5e-3
    assert np.abs(ours.specific_force - ref.specific_force).max() < 0.05
    assert np.abs(ours.v).max() > 0.3


def test_forster_pwm_map() -> None:
    pwm = _NANO.pwm_map
    assert isinstance(pwm, PwmMap)
    # RPM = 0.2685·PWM + 4070.3 (Forster 2015): PWM 0 ↔ 4070.3 rpm, PWM 65535 ↔ 21666 rpm.
    assert pwm.omega_at_zero == pytest.approx(4070.3 * 2 * np.pi / 60)
    assert pwm.to_speed(1.0) == pytest.approx((0.2685 * 65535 + 4070.3) * 2 * np.pi / 60)
    u = np.array([0.0, 0.3, 0.74, 1.0])
    assert np.allclose(pwm.to_command(pwm.to_speed(u)), u)
    assert pwm.to_command(np.array([0.0, 1e5])).tolist() == [0.0, 1.0]
    assert 0.6 < float(pwm.to_command(_NANO.hover_speed)) < 0.85  # Crazyflie hovers around 3/4 PWM
    assert _NANO.quad_params["rotor_speed_max"] == pytest.approx(pwm.omega_at_full)


def test_imu_error_model_statistics() -> None:
    noise = _NANO.imu
    rate = 100.0
    err = draw_imu_errors(noise, 20000, rate, np.random.default_rng(0))
    assert err.acc_noise.std() == pytest.approx(noise.acc_density * np.sqrt(rate), rel=0.03)
    assert err.gyro_noise.std() == pytest.approx(noise.gyro_density * np.sqrt(rate), rel=0.03)
    steps = np.diff(err.acc_bias, axis=0)
    assert steps.std() == pytest.approx(noise.acc_random_walk / np.sqrt(rate), rel=0.03)
    again = draw_imu_errors(noise, 20000, rate, np.random.default_rng(0))
    assert np.array_equal(err.acc_bias, again.acc_bias)


@pytest.mark.parametrize(("preset", "family"), [("racer", "racing"), ("rpm", "minsnap")])
def test_fast_presets_fly_stably(preset: str, family: str) -> None:
    flight = simulate_flight(preset, family, 12.0, seed=4)
    spec = PRESETS[preset]
    assert flight.rotor_kind == spec.rotor_kind
    assert flight.rate_hz == pytest.approx(spec.rate_hz)
    assert flight.metadata["tracking_rms"] < 0.05 * flight.metadata["trajectory"]["size"]
    assert flight.metadata["max_speed"] <= 1.25 * spec.speed_range[1]
    if spec.rotor_kind == "speed":
        assert flight.rotor[0] == pytest.approx(np.full(4, spec.hover_speed), abs=5 * spec.rotor_noise_std)


def test_racer_reaches_racing_speed() -> None:
    fast = dataclasses.replace(PRESETS["racer"], speed_range=(20.0, 20.0))
    flight = simulate_flight(fast, "circle", 12.0, seed=0, noise=False)
    assert flight.metadata["max_speed"] > 17.0
    # At speed, body-x drag is strongly negative along the direction of flight (tangent yaw: forward flight).
    vb = flight.body_velocity()
    fast_rows = vb[:, 0] > 15.0
    assert fast_rows.any() and (flight.acc[fast_rows, 0] < -2.0).all()


def test_divergence_is_reported_with_the_flight_name() -> None:
    # An unstable motor model (negative time constant): the rotors run to their limits and the vehicle is lost.
    weak = dataclasses.replace(PRESETS["nano"], quad_params={**PRESETS["nano"].quad_params, "tau_m": -0.01})
    with pytest.raises(SimulationError, match=r"sim_circle_005 \(preset nano"):
        simulate_flight(weak, "circle", 20.0, seed=0, index=5)
