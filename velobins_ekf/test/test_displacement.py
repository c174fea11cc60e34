"""Displacement measurement with stochastic cloning: Jacobians, propagation, update, streams, NEES.

The measurement and the clone state are :mod:`velobins_ekf.displacement` and
:mod:`velobins_ekf.clone`; the flights are :mod:`ekf_oracles`' analytic ones with a simulated
displacement sensor (TLIO's measurement: the true displacement over a 1 s window in the yaw frame
of the window start, plus white noise of known covariance) at 20 Hz.
"""

from __future__ import annotations

import numpy as np
import pytest
from ekf_oracles import AnalyticTrajectory, generic_state, plus, simulate_imu
from scipy.stats import chi2

from velobins_ekf import clone as cl
from velobins_ekf import displacement as disp
from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import BA, BG, DIM, POS, ROT, VEL, ErrorStateEkf, NavState
from velobins_ekf.offline import run_offline, run_offline_displacement
from velobins_ekf.runner import VelocityEkf
from velobins_ekf.so3 import right_jacobian, so3_exp, so3_log

TRAJ = AnalyticTrajectory()
ACC = np.array([0.7, -1.3, 9.5])
GYRO = np.array([0.9, -0.4, 1.7])


def _filter_with_clones(n_clones: int = 2, yaw_frame: bool = True) -> ErrorStateEkf:
    """A filter with ``n_clones`` clones 0.05 s apart and a correlated, full covariance."""
    ekf = ErrorStateEkf(EkfConfig(displacement_yaw_frame=yaw_frame, init_sigma_vel=0.5), generic_state())
    for k in range(n_clones):
        for _ in range(10):
            ekf.propagate(0.005, ACC, GYRO)
        ekf.clone_pose(0.05 * k)
    for _ in range(10):
        ekf.propagate(0.005, ACC, GYRO)
    return ekf


def test_clone_jacobian_matches_numerical_differentiation_and_augment_is_j_p_jt() -> None:
    s0 = generic_state()
    eps = 1e-6
    j_num = np.zeros((cl.CLONE_DIM, DIM))
    for k in range(DIM):
        dx = np.zeros(DIM)
        dx[k] = eps
        up, dn = plus(s0, dx), plus(s0, -dx)
        j_num[:, k] = np.concatenate([so3_log(dn.rot.T @ up.rot), up.pos - dn.pos]) / (2 * eps)
    np.testing.assert_allclose(cl.clone_jacobian(), j_num, atol=1e-9)

    ekf = _filter_with_clones(2)
    before = cl.assemble(ekf.cov, ekf.clones)
    ekf.clone_pose(0.2)
    j_aug = np.zeros((before.shape[0] + 6, before.shape[0]))
    j_aug[: before.shape[0]] = np.eye(before.shape[0])
    j_aug[before.shape[0] :, :DIM] = j_num
    np.testing.assert_allclose(cl.assemble(ekf.cov, ekf.clones), j_aug @ before @ j_aug.T, atol=1e-12)
    np.testing.assert_array_equal(ekf.clones.pos[-1], ekf.state.pos)
    assert ekf.clones.stamps == [0.0, 0.05, 0.2]


@pytest.mark.parametrize("yaw_frame", [True, False], ids=["yaw", "world"])
def test_measurement_jacobian_matches_numerical_differentiation(yaw_frame: bool) -> None:
    ekf = _filter_with_clones(2, yaw_frame)
    st, clones = ekf.state, ekf.clones
    h = disp.jacobian(st, clones, 1, yaw_frame)
    n = h.shape[1]
    eps = 1e-6
    h_num = np.zeros((3, n))
    for k in range(n):
        vals = []
        for sign in (1.0, -1.0):
            dx = np.zeros(n)
            dx[k] = sign * eps
            c = clones.copy()
            cl.inject_clones(c, dx[DIM:], np.zeros((n, n)))
            vals.append(disp.predict(plus(st, dx[:DIM]), c, 1, yaw_frame))
        h_num[:, k] = (vals[0] - vals[1]) / (2 * eps)
    np.testing.assert_allclose(h, h_num, atol=1e-8)
    assert np.abs(h[:, DIM:]).max() > 0.5  # the clone columns are exercised
    if yaw_frame:
        assert np.abs(h[:, DIM + 6 : DIM + 9]).max() > 1e-3  # the clone-yaw column is non-trivial


def test_clones_propagate_as_constants_only_through_the_cross_terms() -> None:
    """P_aug ← blockdiag(Φ, I) P_aug blockdiag(Φ, I)ᵀ + blockdiag(Q, 0), for one interval and a block."""
    for steps in (3, 40):  # the one-interval loop and the block (compose) path
        ekf = _filter_with_clones(3)
        p0 = cl.assemble(ekf.cov, ekf.clones)
        phi, q = np.eye(DIM), np.zeros((DIM, DIM))
        for _ in range(steps):
            ekf.propagate(0.005, ACC, GYRO)
            ekf.flush()
            f, qk = ekf.transition_matrix(), ekf.process_noise()
            phi, q = f @ phi, f @ q @ f.T + qk
        a = np.eye(p0.shape[0])
        a[:DIM, :DIM] = phi
        expected = a @ p0 @ a.T
        expected[:DIM, :DIM] += q
        np.testing.assert_allclose(cl.assemble(ekf.cov, ekf.clones), expected, rtol=1e-9, atol=1e-14)


def test_displacement_update_is_the_textbook_kalman_update_on_the_augmentedtest_state() -> None:
    ekf = _filter_with_clones(2)
    st, clones = ekf.state.copy(), ekf.clones.copy()
    p = cl.assemble(ekf.cov, clones)
    h = disp.jacobian(st, clones, 0, True)
    z = disp.predict(st, clones, 0, True) + np.array([0.03, -0.02, 0.01])
    r = np.array([[4e-4, 1e-4, 0.0], [1e-4, 9e-4, 0.0], [0.0, 0.0, 1e-4]])  # full covariance
    res = ekf.update_displacement(0.0, z, r, stamp=0.15)
    s = h @ p @ h.T + r
    k = p @ h.T @ np.linalg.inv(s)
    dx = k @ (z - disp.predict(st, clones, 0, True))
    assert res.accepted and res.t_start == 0.0 and res.stamp == 0.15
    np.testing.assert_allclose(res.innovation_cov, s, rtol=1e-12)
    np.testing.assert_allclose(ekf.state.pos - st.pos, dx[POS], atol=1e-12)
    np.testing.assert_allclose(so3_log(st.rot.T @ ekf.state.rot), dx[ROT], atol=1e-12)
    np.testing.assert_allclose(ekf.clones.pos[0] - clones.pos[0], dx[DIM + 3 : DIM + 6], atol=1e-12)
    np.testing.assert_allclose(so3_log(clones.rot[0].T @ ekf.clones.rot[0]), dx[DIM : DIM + 3], atol=1e-12)
    ikh = np.eye(p.shape[0]) - k @ h
    joseph = ikh @ p @ ikh.T + k @ r @ k.T
    reset = np.eye(p.shape[0])  # Jr(δθ) on every rotation error block: the state's and each clone's
    for rows in (ROT, slice(DIM, DIM + 3), slice(DIM + 6, DIM + 9)):
        reset[rows, rows] = right_jacobian(dx[rows])
    np.testing.assert_allclose(cl.assemble(ekf.cov, ekf.clones), reset @ joseph @ reset.T, rtol=1e-9, atol=1e-15)
    # the new innovation is smaller than the prior one
    assert np.linalg.norm(z - disp.predict(ekf.state, ekf.clones, 0, True)) < np.linalg.norm(res.innovation)
    with pytest.raises(ValueError, match="no clone"):
        ekf.update_displacement(0.3, z, r)


def test_velocity_update_with_clones_gives_the_same_navigation_posterior() -> None:
    """Clones do not enter the velocity measurement: the 15-D marginal is the clone-free update's."""
    with_clones = _filter_with_clones(3)
    without = ErrorStateEkf(with_clones.config, with_clones.state, with_clones.cov)
    z, r = with_clones.state.body_velocity + np.array([0.1, -0.2, 0.05]), np.eye(3) * 0.01
    a, b = with_clones.update_velocity(z, r), without.update_velocity(z, r)
    np.testing.assert_allclose(a.innovation_cov, b.innovation_cov, rtol=1e-12)
    np.testing.assert_allclose(with_clones.state.pos, without.state.pos, atol=1e-12)
    np.testing.assert_allclose(with_clones.state.vel, without.state.vel, atol=1e-12)
    np.testing.assert_allclose(with_clones.cov, without.cov, rtol=1e-9, atol=1e-15)
    assert np.abs(with_clones.clones.cross).max() > 0  # ...and the clones moved with it


def test_marginalising_a_clone_keeps_the_other_blocks_and_max_clones_is_a_bound() -> None:
    ekf = _filter_with_clones(3)
    full = cl.assemble(ekf.cov, ekf.clones)
    ekf.drop_clone(0.05)
    keep = np.r_[0 : DIM + 6, DIM + 12 : DIM + 18]
    np.testing.assert_array_equal(cl.assemble(ekf.cov, ekf.clones), full[np.ix_(keep, keep)])
    assert ekf.clones.stamps == [0.0, 0.1]
    small = ErrorStateEkf(EkfConfig(max_clones=2), generic_state())
    assert [small.clone_pose(t) for t in (0.0, 0.1, 0.2)] == [False, False, True]
    assert small.clones.stamps == [0.1, 0.2]


# ---------------------------------------------------------------------------------------- flights
def _flight(seed: int, duration: float, cfg: EkfConfig, sigma: float = 0.02, window: float = 1.0, perturb=True):
    """Noisy IMU (200 Hz), TLIO-style displacements every 0.05 s over ``window`` s, an initial
    estimate drawn from P0 (when ``perturb``). Returns the arrays and the truth."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration + 0.0025, 0.005)
    tr = TRAJ.sample(t)
    ba0 = rng.standard_normal(3) * cfg.init_sigma_acc_bias
    bg0 = rng.standard_normal(3) * cfg.init_sigma_gyro_bias
    imu = simulate_imu(tr, cfg, rng, ba0, bg0)
    t_end = np.arange(window, duration, 0.05) + 1e-3  # stamps between IMU samples
    t_start = t_end - window
    a, b = TRAJ.sample(t_start), TRAJ.sample(t_end)
    yaw = np.array([disp.yaw_rotation(disp.yaw_of(r)) for r in a.rot])
    frame = yaw if cfg.displacement_yaw_frame else np.broadcast_to(np.eye(3), yaw.shape)
    dz = np.einsum("kji,kj->ki", frame, b.pos - a.pos) + rng.standard_normal((t_end.size, 3)) * sigma
    truth0 = NavState(tr.rot[0].copy(), tr.vel[0].copy(), tr.pos[0].copy(), ba0, bg0)
    p0 = ErrorStateEkf(cfg, truth0).cov
    e0 = np.linalg.cholesky(p0) @ rng.standard_normal(DIM) if perturb else np.zeros(DIM)
    s0 = NavState(tr.rot[0] @ so3_exp(-e0[ROT]), tr.vel[0] - e0[VEL], tr.pos[0] - e0[POS], ba0 - e0[BA], bg0 - e0[BG])
    meas = (t_start, t_end, dz, np.full((t_end.size, 3), sigma**2))
    return t, imu, tr, meas, s0, p0


def _pos_vel_error(res, tr) -> np.ndarray:
    return np.concatenate([tr.vel[-1] - res.vel[-1], tr.pos[-1] - res.pos[-1]])


def test_monte_carlo_nees_of_position_and_velocity_is_consistent() -> None:
    """N runs of 3 s, displacement-only: the mean 6-dof NEES (velocity, position) at the end lies in
    the two-sided 95 % χ² interval of N runs, N·NEES ~ χ²(6 N)."""
    cfg = EkfConfig(acc_noise_density=0.05, gyro_noise_density=0.005, acc_random_walk=0.01, gyro_random_walk=1e-3)
    n_runs, nees, nis = 30, [], []
    for seed in range(n_runs):
        t, imu, tr, meas, s0, p0 = _flight(seed, 3.0, cfg)
        res = run_offline_displacement(
            t, imu.acc, imu.gyro, *meas, init_state=s0, init_cov=p0, config=cfg, output_stride=t.size - 1
        )
        assert res.stats.disp_applied == meas[0].size and res.stats.disp_late == 0
        e = _pos_vel_error(res, tr)
        p = res.final_cov[3:9, 3:9]
        nees.append(float(e @ np.linalg.solve(p, e)))
        nis.extend(u.nis for u in res.displacement_updates)
    lo, hi = chi2.ppf([0.025, 0.975], 6 * n_runs) / n_runs
    assert lo < np.mean(nees) < hi, (np.mean(nees), lo, hi)
    assert 2.5 < np.mean(nis) < 3.5  # χ²₃ on average


def test_displacement_fusion_bounds_position_drift_far_below_imu_only() -> None:
    cfg = EkfConfig()
    t, imu, tr, meas, s0, _ = _flight(7, 20.0, cfg, perturb=False)
    imu.acc += np.array([0.05, -0.04, 0.03])  # an uncalibrated accelerometer bias
    fused = run_offline_displacement(t, imu.acc, imu.gyro, *meas, init_state=s0, config=cfg, output_stride=200)
    none = np.zeros((0, 3))
    dead = run_offline(t, imu.acc, imu.gyro, none[:, 0], none, none, init_state=s0, config=cfg, output_stride=200)
    err_fused = np.linalg.norm(fused.pos - tr.pos[::200], axis=1).max()
    err_dead = np.linalg.norm(dead.pos - tr.pos[::200], axis=1).max()
    assert err_dead > 5.0 and err_fused < 0.5, (err_fused, err_dead)
    assert err_fused < err_dead / 20
    assert len(fused.final_cov) == DIM and fused.stats.clones_dropped == 0


def _stream(t, imu, meas, s0, p0, cfg, ahead: bool, lag: float) -> VelocityEkf:
    """Feed IMU and displacements, each displacement ``lag`` s after its end stamp; clones asked for
    ahead (``ahead``) or left for the filter to make by re-propagation."""
    f = VelocityEkf(cfg)
    f.initialize(t[0], s0, p0)
    t_start, t_end, dz, var = meas
    j = c = 0
    for i, ti in enumerate(t):
        while ahead and c < t_start.size and t_start[c] <= ti:
            assert f.request_clone(t_start[c])
            c += 1
        while j < t_end.size and t_end[j] + lag <= ti:
            assert f.add_displacement(t_start[j], t_end[j], dz[j], np.diag(var[j]))
            j += 1
        f.add_imu(ti, imu.acc[i], imu.gyro[i])
    for k in range(j, t_end.size):  # the last ones, due after the flight's end
        assert f.add_displacement(t_start[k], t_end[k], dz[k], np.diag(var[k]))
    return f


def test_late_displacements_and_missing_clones_equal_in_order_processing() -> None:
    cfg = EkfConfig(history_length=1.5, displacement_yaw_frame=True)
    t, imu, _, meas, s0, p0 = _flight(3, 3.0, cfg, window=0.5)
    ref = _stream(t, imu, meas, s0, p0, cfg, ahead=True, lag=0.0)
    assert ref.stats.disp_applied == meas[0].size and ref.stats.disp_late == 0
    for ahead, lag in ((True, 0.12), (False, 0.0), (False, 0.2)):
        f = _stream(t, imu, meas, s0, p0, cfg, ahead=ahead, lag=lag)
        assert f.stats.disp_applied == meas[0].size and f.stats.disp_late > 0
        np.testing.assert_allclose(f.state.pos, ref.state.pos, atol=1e-9)
        np.testing.assert_allclose(f.state.rot, ref.state.rot, atol=1e-9)
        np.testing.assert_allclose(f.ekf.cov, ref.ekf.cov, atol=1e-12)
        assert [u.stamp for u in f.displacement_updates] == [u.stamp for u in ref.displacement_updates]
        assert len(f.ekf.clones) <= 1  # used clones are marginalised


def test_invalid_and_too_old_displacements_are_dropped_and_counted() -> None:
    cfg = EkfConfig(history_length=0.3)
    t, imu, _, meas, s0, p0 = _flight(1, 1.5, cfg, window=0.5)
    f = _stream(t, imu, meas, s0, p0, cfg, ahead=True, lag=0.0)
    assert not f.add_displacement(1.2, 1.1, np.zeros(3), np.eye(3))  # t_start >= t_end
    assert not f.add_displacement(1.0, 1.2, np.array([np.nan, 0, 0]), np.eye(3))
    assert not f.add_displacement(1.0, 1.2, np.zeros(3), -np.eye(3))
    assert f.stats.disp_invalid == 3
    assert not f.add_displacement(0.2, 0.7, np.zeros(3), np.eye(3))  # clone far before the history
    assert f.stats.disp_too_old == 1


def test_a_clone_on_the_stamp_of_a_displacement_end_is_applied_once_the_imu_reaches_it() -> None:
    """Two events on one IMU stamp (a window's end and the next window's start, as a re-anchored
    20 Hz grid makes them): both are applied there; it used to divide by the zero interval."""
    cfg = EkfConfig(history_length=1.5)
    rng = np.random.default_rng(4)
    filt = VelocityEkf(cfg)
    filt.initialize(0.0, NavState.from_pose(np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(3), np.zeros(3)))
    stamps = np.arange(1, 151) / 100.0
    gravity = np.array([0.0, 0.0, 9.80665])
    for t in stamps[:50]:
        filt.add_imu(float(t), gravity + 0.01 * rng.standard_normal(3), 0.001 * rng.standard_normal(3))
    assert filt.request_clone(0.5)  # now (the filter is at 0.5): made at once
    assert filt.add_displacement(0.5, 1.0, np.zeros(3), 0.01 * np.eye(3))  # pending until 1.0
    assert filt.request_clone(1.0)  # the next window's start on the same stamp as the end
    for t in stamps[50:]:
        filt.add_imu(float(t), gravity + 0.01 * rng.standard_normal(3), 0.001 * rng.standard_normal(3))
    assert filt.stats.disp_applied == 1 and len(filt.displacement_updates) == 1
    assert filt.displacement_updates[0].stamp == 1.0 and filt.displacement_updates[0].accepted
    assert np.all(np.isfinite(filt.state.pos))
