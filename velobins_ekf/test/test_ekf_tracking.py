"""Filter against analytic flights: exact tracking, Monte-Carlo consistency, a 1-hour run."""

from __future__ import annotations

import numpy as np
import pytest
from ekf_oracles import AnalyticTrajectory, simulate_imu
from scipy.stats import chi2

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import DIM, ErrorStateEkf, NavState
from velobins_ekf.offline import run_offline
from velobins_ekf.so3 import so3_exp, so3_log

TRAJ = AnalyticTrajectory()


def _truth_state(tr, i: int = 0, ba=None, bg=None) -> NavState:
    z = np.zeros(3)
    return NavState(
        tr.rot[i].copy(), tr.vel[i].copy(), tr.pos[i].copy(), z if ba is None else ba, z if bg is None else bg
    )


def test_analytic_imu_is_consistent_with_the_trajectory() -> None:
    """The synthetic gyro is Rᵀ Ṙ and the specific force Rᵀ(p̈ − g_vec) (finite differences)."""
    t = np.array([0.3, 1.7, 4.2])
    h = 1e-5
    a, m, b = TRAJ.sample(t - h), TRAJ.sample(t), TRAJ.sample(t + h)
    for k in range(t.size):
        w_num = so3_log(a.rot[k].T @ b.rot[k]) / (2 * h)
        np.testing.assert_allclose(m.gyro[k], w_num, atol=1e-7)
        acc_w = (b.vel[k] - a.vel[k]) / (2 * h)
        np.testing.assert_allclose(m.acc[k], m.rot[k].T @ (acc_w + np.array([0.0, 0.0, TRAJ.gravity])), atol=1e-6)
        np.testing.assert_allclose(m.vel[k], (b.pos[k] - a.pos[k]) / (2 * h), atol=1e-7)


def test_noiseless_flight_is_tracked_to_numerical_precision() -> None:
    """Exact 1 kHz IMU + exact 20 Hz body velocity: the state error stays at the integrator's O(dt²) level."""
    t = np.arange(0.0, 10.0, 1e-3)
    tr = TRAJ.sample(t)
    tm = np.arange(0.05, 10.0, 0.05) + 3e-4  # stamps between IMU samples
    trm = TRAJ.sample(tm)
    res = run_offline(
        t, tr.acc, tr.gyro, tm, trm.body_velocity, np.full((tm.size, 3), 1e-4), init_state=_truth_state(tr)
    )
    assert res.stats.meas_applied == tm.size
    assert np.abs(res.pos - tr.pos).max() < 2e-5
    assert np.abs(res.vel - tr.vel).max() < 2e-5
    rot_err = max(np.linalg.norm(so3_log(res.rot[k].T @ tr.rot[k])) for k in range(0, t.size, 500))
    assert rot_err < 1e-5
    # every update's innovation is at the discretisation level
    assert max(np.abs(u.innovation).max() for u in res.updates) < 1e-4


def test_propagation_is_second_order_accurate() -> None:
    """Halving dt divides the pure-propagation error by ~4 (midpoint scheme, module docstring)."""
    errs = []
    for dt in (2e-3, 1e-3):
        t = np.arange(0.0, 3.0 + dt / 2, dt)
        tr = TRAJ.sample(t)
        res = run_offline(
            t, tr.acc, tr.gyro, np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3)), init_state=_truth_state(tr)
        )
        errs.append(np.linalg.norm(res.pos[-1] - tr.pos[-1]))
    assert 3.5 < errs[0] / errs[1] < 4.5
    assert errs[1] < 1e-5


def _mc_run(seed: int, cfg: EkfConfig, duration: float, rate: float = 200.0, meas_sigma: float = 0.05):
    """One noisy flight; returns the filter's 15-D error and covariance at the end."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration + 0.5 / rate, 1.0 / rate)
    tr = TRAJ.sample(t)
    ba0 = rng.standard_normal(3) * cfg.init_sigma_acc_bias
    bg0 = rng.standard_normal(3) * cfg.init_sigma_gyro_bias
    imu = simulate_imu(tr, cfg, rng, ba0, bg0)
    tm = np.arange(0.05, duration, 0.05)
    trm = TRAJ.sample(tm)
    z = trm.body_velocity + rng.standard_normal((tm.size, 3)) * meas_sigma
    # initial estimate = truth ⊖ a draw from the initial covariance (biases estimated as 0)
    ekf0 = ErrorStateEkf(cfg, _truth_state(tr, 0, ba0, bg0))
    p0 = ekf0.covariance
    e0 = np.linalg.cholesky(p0) @ rng.standard_normal(DIM)
    s0 = NavState(tr.rot[0] @ so3_exp(-e0[0:3]), tr.vel[0] - e0[3:6], tr.pos[0] - e0[6:9], np.zeros(3), np.zeros(3))
    s0.acc_bias = ba0 - e0[9:12]
    s0.gyro_bias = bg0 - e0[12:15]
    res = run_offline(
        t,
        imu.acc,
        imu.gyro,
        tm,
        z,
        np.full((tm.size, 3), meas_sigma**2),
        init_state=s0,
        init_cov=p0,
        config=cfg,
        output_stride=t.size - 1,
    )
    k = -1
    err = np.concatenate(
        [
            so3_log(res.rot[k].T @ tr.rot[-1]),
            tr.vel[-1] - res.vel[k],
            tr.pos[-1] - res.pos[k],
            imu.acc_bias[-1] - res.final_state.acc_bias,
            imu.gyro_bias[-1] - res.final_state.gyro_bias,
        ]
    )
    return err, res


def test_monte_carlo_nees_is_consistent() -> None:
    """Average 15-dof NEES of N runs lies in the two-sided 95 % χ² interval: N·NEES ~ χ²(15 N)."""
    cfg = EkfConfig(acc_noise_density=0.05, gyro_noise_density=0.005, acc_random_walk=0.01, gyro_random_walk=1e-3)
    n_runs = 25
    nees = []
    for seed in range(n_runs):
        err, res = _mc_run(seed, cfg, duration=6.0)
        nees.append(float(err @ np.linalg.solve(res.final_cov, err)))
    lo, hi = chi2.ppf([0.025, 0.975], DIM * n_runs) / n_runs
    assert lo < np.mean(nees) < hi, (np.mean(nees), lo, hi)


@pytest.mark.slow
def test_one_hour_flight_stays_finite_pd_and_bounded() -> None:
    """1 h at 200 Hz IMU (noisy, biased) with 20 Hz noisy velocity updates (σ = 0.05 m/s).

    Bound on the position error, 15 m, from two terms: (1) the fused velocity error (σ_v ≈ 0.02–
    0.03 m/s, correlation time τ ≈ 1 s) integrates to a random walk σ_p ≈ σ_v √(T τ) ≈ 1.8 m at
    T = 3600 s (3σ ≈ 5.4 m); (2) yaw is unobservable from body velocity and drifts with gyro noise
    and bias (≲ 1 rad in 1 h here), which rotates this path (confined to r ≈ 4 m around its centre)
    and misplaces it by at most 2 r |sin(δψ/2)| ≲ 4 m. 15 m is ~1.5x their sum (observed: ≈ 7 m);
    IMU-only dead reckoning with these biases is off by kilometres. NEES is not asserted over 1 h:
    an EKF gains spurious yaw information through linearisation (the known inconsistency).
    """
    cfg = EkfConfig()
    rng = np.random.default_rng(42)
    duration, rate = 3600.0, 200.0
    t = np.arange(0.0, duration, 1.0 / rate)
    tr = TRAJ.sample(t)
    imu = simulate_imu(tr, cfg, rng, np.array([0.05, -0.03, 0.08]), np.array([0.002, -0.001, 0.003]))
    tm = np.arange(0.05, duration, 0.05)
    trm = TRAJ.sample(tm)
    z = trm.body_velocity + rng.standard_normal((tm.size, 3)) * 0.05
    res = run_offline(
        t,
        imu.acc,
        imu.gyro,
        tm,
        z,
        np.full((tm.size, 3), 0.05**2),
        init_state=_truth_state(tr),
        config=cfg,
        output_stride=200,
        keep_updates=False,
        check_covariance=True,
        record_covariance=True,
    )
    assert res.cov_diag is not None and res.cov_diag.shape == (res.t.size, 15)
    assert np.all(np.isfinite(res.pos)) and np.all(np.isfinite(res.cov_diag))
    assert res.stats.meas_applied == tm.size
    assert res.min_eigenvalue > 0 and res.max_asymmetry < 1e-12
    idx = np.arange(0, t.size, 200)
    pos_err = np.linalg.norm(res.pos - tr.pos[idx], axis=1)
    assert pos_err.max() < 15.0
    # the observable quantity, body velocity, stays at the measurement-noise level throughout
    vb_err = np.einsum("kji,kj->ki", res.rot, res.vel) - tr.body_velocity[idx]
    assert np.sqrt(np.mean(np.sum(vb_err**2, axis=1))) < 0.1
