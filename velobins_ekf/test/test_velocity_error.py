"""The Gauss-Markov velocity-measurement error b (velobins_ekf.velocity_error) in the filter core and the runner."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from ekf_oracles import AnalyticTrajectory, generic_state, plus, simulate_imu

from velobins_ekf import velocity_error as ve
from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import DIM, ROT, VEL, ErrorStateEkf, NavState
from velobins_ekf.runner import VelocityEkf
from velobins_ekf.so3 import right_jacobian, so3_log
from velobins_ekf.update import measurement_jacobian

GM = EkfConfig(velocity_error_sigma=0.4, velocity_error_tau=0.5)
TRAJ = AnalyticTrajectory()
RATE = 200.0


def _minus(a: NavState, b: NavState) -> np.ndarray:
    out = np.zeros(DIM)
    out[ROT] = so3_log(b.rot.T @ a.rot)
    out[VEL] = a.vel - b.vel
    out[6:9] = a.pos - b.pos
    out[9:12] = a.acc_bias - b.acc_bias
    out[12:15] = a.gyro_bias - b.gyro_bias
    return out


def test_white_by_default_and_prior_when_on() -> None:
    assert ErrorStateEkf(EkfConfig(), generic_state()).velocity_error is None
    err = ErrorStateEkf(GM, generic_state()).velocity_error
    assert err is not None
    np.testing.assert_array_equal(err.value, np.zeros(3))
    np.testing.assert_array_equal(err.cross, np.zeros((DIM, 3)))
    np.testing.assert_allclose(err.cov, np.eye(3) * 0.16)
    with pytest.raises(ValueError, match="velocity_error_sigma"):
        EkfConfig(velocity_error_sigma=-0.1)


def test_propagation_is_the_augmented_transition() -> None:
    """P_aug ← diag(F, aI) P_aug diag(F, aI)ᵀ + diag(Q, σ²(1−a²)I), one interval, against the dense product."""
    ekf = ErrorStateEkf(GM, generic_state())
    ekf.update_velocity(generic_state().body_velocity + 0.3, np.eye(3) * 0.01)  # b correlated with the state
    before = ve.assemble(ekf.cov, ekf.velocity_error)
    b0 = ekf.velocity_error.value.copy()
    dt = 0.005
    ekf.propagate(dt, np.array([0.3, -0.2, 9.9]), np.array([0.2, -0.1, 0.4]))
    f, q = ekf.transition_matrix(), ekf.process_noise()
    a = math.exp(-dt / GM.velocity_error_tau)
    f_aug, q_aug = np.eye(DIM + 3) * a, np.eye(DIM + 3) * GM.velocity_error_sigma**2 * (1 - a * a)
    f_aug[:DIM, :DIM], q_aug[:DIM, :DIM] = f, q
    expected = f_aug @ before @ f_aug.T + q_aug
    np.testing.assert_allclose(ve.assemble(ekf.cov, ekf.velocity_error), expected, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(ekf.velocity_error.value, b0 * a)


def test_block_and_per_interval_paths_agree() -> None:
    rng = np.random.default_rng(4)
    acc = rng.normal([0.0, 0.0, 9.8], 0.5, (300, 3))
    gyro = rng.normal(0.0, 0.4, (300, 3))
    noise = 0.1 * rng.standard_normal((30, 3))
    runs = []
    for read_every in (1, None):  # one interval at a time; blocks of up to 256 between the updates
        ekf = ErrorStateEkf(GM, generic_state())
        for k in range(300):
            ekf.propagate(0.005, acc[k], gyro[k])
            if read_every == 1:
                ekf.flush()
            if k % 10 == 9:
                ekf.update_velocity(ekf.velocity_body + noise[k // 10], np.eye(3) * 0.02)
        runs.append(ekf)
    one, block = runs
    np.testing.assert_allclose(block.velocity_error.value, one.velocity_error.value, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(block.velocity_error.cross, one.velocity_error.cross, rtol=1e-8, atol=1e-13)
    np.testing.assert_allclose(block.velocity_error.cov, one.velocity_error.cov, rtol=1e-9)
    np.testing.assert_allclose(block.state.vel, one.state.vel, rtol=1e-9, atol=1e-12)


def test_long_propagation_forgets_b() -> None:
    """Without updates b decays to 0, P_bb to the stationary σ² I and P_xb to 0."""
    ekf = ErrorStateEkf(GM, generic_state())
    ekf.update_velocity(generic_state().body_velocity + 0.5, np.eye(3) * 0.01)
    assert np.abs(ekf.velocity_error.value).max() > 0.05
    for _ in range(2000):  # 10 s = 20 τ
        ekf.propagate(0.005, np.array([0.0, 0.0, 9.80665]), np.zeros(3))
    err = ekf.velocity_error
    assert np.abs(err.value).max() < 1e-6
    np.testing.assert_allclose(err.cov, np.eye(3) * 0.16, atol=1e-8)
    assert np.abs(err.cross).max() < 1e-6


def test_update_is_the_textbook_kalman_update_of_the_augmented_state() -> None:
    s0 = generic_state()
    ekf = ErrorStateEkf(GM, s0)
    ekf.propagate(0.05, np.array([0.3, -0.2, 9.9]), np.array([0.2, -0.1, 0.4]))
    s_prior = ekf.state.copy()
    err = ekf.velocity_error.copy()
    err.value = np.array([0.1, -0.2, 0.05])  # a prior b, so that the innovation subtracts it
    ekf.set_velocity_error(err)
    p = ve.assemble(ekf.cov, err)
    z = s_prior.body_velocity + np.array([0.3, -0.1, 0.2])
    r = np.diag([0.04, 0.09, 0.01])
    res = ekf.update_velocity(z, r)
    h = np.zeros((3, DIM + 3))
    h[:, :DIM] = measurement_jacobian(s_prior)
    h[:, DIM:] = np.eye(3)
    y = z - s_prior.body_velocity - err.value
    s = h @ p @ h.T + r
    k = p @ h.T @ np.linalg.inv(s)
    dx = k @ y
    i_kh = np.eye(DIM + 3) - k @ h
    p_joseph = i_kh @ p @ i_kh.T + k @ r @ k.T
    jr = np.eye(DIM + 3)
    jr[ROT, ROT] = right_jacobian(dx[ROT])
    np.testing.assert_allclose(res.innovation, y, atol=1e-12)
    np.testing.assert_allclose(res.innovation_cov, s, rtol=1e-12)
    np.testing.assert_allclose(_minus(ekf.state, s_prior), dx[:DIM], atol=1e-12)
    np.testing.assert_allclose(ekf.velocity_error.value, err.value + dx[DIM:], atol=1e-12)
    np.testing.assert_allclose(ve.assemble(ekf.cov, ekf.velocity_error), jr @ p_joseph @ jr.T, rtol=1e-9, atol=1e-15)
    # the outputs are the vehicle's velocity, not the measured one: Rᵀv, without b
    np.testing.assert_allclose(res.vel_body, ekf.state.rot.T @ ekf.state.vel)
    assert plus(s_prior, dx[:DIM]).vel == pytest.approx(ekf.state.vel)


def _flight(seed: int, duration: float = 30.0):
    """IMU of the analytic flight and 20 Hz velocity measurements with a Gauss-Markov error (σ_b 0.4 m/s, τ 0.5 s)
    plus white noise of σ 0.05 m/s."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration, 1.0 / RATE)
    tr = TRAJ.sample(t)
    imu = simulate_imu(tr, EkfConfig(), rng)
    tm = np.arange(0.05, duration - 0.2, 0.05) + 0.0013
    b = np.zeros((tm.size, 3))
    a = math.exp(-0.05 / GM.velocity_error_tau)
    b[0] = rng.normal(0.0, GM.velocity_error_sigma, 3)
    for k in range(1, tm.size):
        b[k] = a * b[k - 1] + rng.normal(0.0, GM.velocity_error_sigma * math.sqrt(1 - a * a), 3)
    truth = TRAJ.sample(tm).body_velocity
    z = truth + b + rng.normal(0.0, 0.05, (tm.size, 3))
    s0 = NavState(tr.rot[0].copy(), tr.vel[0].copy(), tr.pos[0].copy(), np.zeros(3), np.zeros(3))
    return t, imu, tm, z, b, truth, s0


def _run(config: EkfConfig, t, imu, tm, z, cov, s0, delay: float = 0.0) -> VelocityEkf:
    """The runner over the flight; each measurement handed over ``delay`` seconds after its stamp."""
    f = VelocityEkf(config)
    f.initialize(t[0], s0)
    j = 0
    for i in range(t.size):
        while j < tm.size and tm[j] + delay <= t[i]:
            assert f.add_velocity(tm[j], z[j], cov)
            j += 1
        f.add_imu(t[i], imu.acc[i], imu.gyro[i])
    return f


def _fused_figures(f: VelocityEkf, truth: np.ndarray, start: int) -> tuple[float, float]:
    """RMS error and mean NEES of the fused body velocity from update ``start`` on."""
    ups = f.updates[start:]
    err = np.array([u.vel_body for u in ups]) - truth[start:]
    nees = [float(e @ np.linalg.solve(u.vel_body_cov, e)) for u, e in zip(ups, err, strict=True)]
    return float(np.sqrt(np.mean(err**2))), float(np.mean(nees))


def test_a_filter_that_models_the_correlated_error_estimates_it_and_is_consistent() -> None:
    """Measurements with a slow error: the white filter given their whole variance is over-confident (it takes 20
    estimates a second as independent), the augmented one is consistent (mean NEES near 3), a little more accurate,
    and tracks b."""
    t, imu, tm, z, b, truth, s0 = _flight(seed=11)
    start = tm.size // 4  # after the start-up
    white = _run(EkfConfig(), t, imu, tm, z, np.eye(3) * (GM.velocity_error_sigma**2 + 0.05**2), s0)
    gm = _run(GM, t, imu, tm, z, np.eye(3) * 0.05**2, s0)
    rms_white, nees_white = _fused_figures(white, truth, start)
    rms_gm, nees_gm = _fused_figures(gm, truth, start)
    assert nees_white > 10.0  # 22.9 when written
    assert 1.5 < nees_gm < 4.5  # 2.1
    assert rms_gm < 0.95 * rms_white  # 0.203 against 0.226 m/s
    b_hat = z - np.array([u.vel_body for u in gm.updates])  # the measurement less the fused velocity
    assert np.corrcoef(b_hat[start:].ravel(), b[start:].ravel())[0, 1] > 0.7  # 0.84


def test_late_measurements_restore_b_from_the_snapshots() -> None:
    t, imu, tm, z, _, _, s0 = _flight(seed=5, duration=4.0)
    cov = np.eye(3) * 0.05**2
    in_order = _run(GM, t, imu, tm, z, cov, s0)
    late = _run(GM, t, imu, tm, z, cov, s0, delay=0.13)
    assert late.stats.meas_late == tm.size
    np.testing.assert_allclose(late.state.vel, in_order.state.vel, atol=1e-9)
    np.testing.assert_allclose(late.ekf.velocity_error.value, in_order.ekf.velocity_error.value, atol=1e-9)
    np.testing.assert_allclose(late.ekf.velocity_error.cross, in_order.ekf.velocity_error.cross, atol=1e-12)
    np.testing.assert_allclose(late.ekf.cov, in_order.ekf.cov, atol=1e-12)


def test_set_config_keeps_b_and_displacements_are_refused() -> None:
    t, imu, tm, z, _, _, s0 = _flight(seed=6, duration=2.0)
    f = _run(GM, t, imu, tm, z, np.eye(3) * 0.05**2, s0)
    b = f.ekf.velocity_error.value.copy()
    f.set_config(dataclasses.replace(GM, acc_noise_density=0.05))
    np.testing.assert_array_equal(f.ekf.velocity_error.value, b)
    assert not f.add_displacement(t[-1] - 1.0, t[-1], np.zeros(3), np.eye(3) * 0.01)
    assert not f.request_clone(t[-1] - 0.5)
    assert f.stats.disp_invalid == 2
    with pytest.raises(ValueError, match="displacement"):
        f.ekf.clone_pose(t[-1])
