"""Jacobians, noise model and update of the EKF core against numerical differentiation."""

from __future__ import annotations

import numpy as np
import pytest
from ekf_oracles import generic_state, plus

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import BA, BG, DIM, ROT, VEL, ErrorStateEkf, NavState
from velobins_ekf.so3 import right_jacobian, so3_log

DT = 0.01  # a long step so the second-order terms of F are clearly exercised
ACC = np.array([0.7, -1.3, 9.5])
GYRO = np.array([0.9, -0.4, 1.7])


def _minus(a: NavState, b: NavState) -> np.ndarray:
    """a ⊖ b, the error δx with a = b ⊕ δx."""
    return np.concatenate(
        [so3_log(b.rot.T @ a.rot), a.vel - b.vel, a.pos - b.pos, a.acc_bias - b.acc_bias, a.gyro_bias - b.gyro_bias]
    )


def _propagated(s: NavState, acc: np.ndarray = ACC, gyro: np.ndarray = GYRO) -> tuple[NavState, ErrorStateEkf]:
    ekf = ErrorStateEkf(EkfConfig(), s)
    ekf.propagate(DT, acc, gyro)
    return ekf.state.copy(), ekf


# a normal rate, and one whose bias-corrected half angle is below so3.SMALL_ANGLE (series branch)
@pytest.mark.parametrize(
    "gyro", [GYRO, generic_state().gyro_bias + np.array([2e-3, -1e-3, 1e-3])], ids=["rate", "tiny"]
)
def test_transition_matrix_matches_numerical_differentiation(gyro: np.ndarray) -> None:
    s0 = generic_state()
    nominal, ekf = _propagated(s0, gyro=gyro)
    f = ekf.transition_matrix()
    eps = 1e-6
    f_num = np.zeros((DIM, DIM))
    for j in range(DIM):
        dx = np.zeros(DIM)
        dx[j] = eps
        up = _minus(_propagated(plus(s0, dx), gyro=gyro)[0], nominal)
        dn = _minus(_propagated(plus(s0, -dx), gyro=gyro)[0], nominal)
        f_num[:, j] = (up - dn) / (2 * eps)
    np.testing.assert_allclose(f, f_num, atol=2e-9)
    # the second-order blocks are not negligible at this dt: a wrong F would fail above
    assert np.abs(f[VEL, BG]).max() > 1e-5


def test_noise_jacobian_is_bias_columns_and_q_matches_density() -> None:
    """Perturbing the IMU input moves the error like a bias error of opposite sign; Q = G W Gᵀ."""
    s0 = generic_state()
    nominal, ekf = _propagated(s0)
    f = ekf.transition_matrix()
    eps = 1e-6
    g_num = np.zeros((DIM, 6))
    for j in range(6):
        d = np.zeros(6)
        d[j] = eps
        up = _minus(_propagated(s0, ACC + d[:3], GYRO + d[3:])[0], nominal)
        dn = _minus(_propagated(s0, ACC - d[:3], GYRO - d[3:])[0], nominal)
        g_num[:, j] = (up - dn) / (2 * eps)
    np.testing.assert_allclose(g_num[0:9], -f[0:9, 9:15], atol=2e-9)
    cfg = ekf.config
    w = np.diag([cfg.acc_noise_density**2 / DT] * 3 + [cfg.gyro_noise_density**2 / DT] * 3)
    q_expected = np.zeros((DIM, DIM))
    g = -f[0:9, 9:15]  # equal to g_num (asserted above), without its finite-difference noise
    q_expected[0:9, 0:9] = g @ w @ g.T
    q_expected[BA, BA] = np.eye(3) * cfg.acc_random_walk**2 * DT
    q_expected[BG, BG] = np.eye(3) * cfg.gyro_random_walk**2 * DT
    np.testing.assert_allclose(ekf.process_noise(), q_expected, rtol=1e-9, atol=1e-20)
    # sampled white noise: velocity variance grows by density² · dt per step (+ a tiny gyro term)
    np.testing.assert_allclose(np.diag(ekf.process_noise()[VEL, VEL]), cfg.acc_noise_density**2 * DT, rtol=1e-4)


def test_covariance_propagation_is_f_p_ft_plus_q() -> None:
    s0 = generic_state()
    ekf = ErrorStateEkf(EkfConfig(), s0)
    p0 = ekf.covariance
    ekf.propagate(DT, ACC, GYRO)
    f, q = ekf.transition_matrix(), ekf.process_noise()
    np.testing.assert_allclose(ekf.covariance, f @ p0 @ f.T + q, rtol=1e-12, atol=1e-18)


def test_measurement_jacobian_matches_numerical_differentiation() -> None:
    s0 = generic_state()
    ekf = ErrorStateEkf(EkfConfig(), s0)
    h = ekf.measurement_jacobian()
    eps = 1e-6
    h_num = np.zeros((3, DIM))
    for j in range(DIM):
        dx = np.zeros(DIM)
        dx[j] = eps
        sp, sm = plus(s0, dx), plus(s0, -dx)
        h_num[:, j] = (sp.rot.T @ sp.vel - sm.rot.T @ sm.vel) / (2 * eps)
    np.testing.assert_allclose(h, h_num, atol=1e-9)


def test_update_matches_textbook_kalman_and_injects_with_reset() -> None:
    s0 = generic_state()
    ekf = ErrorStateEkf(EkfConfig(), s0)
    p = ekf.covariance
    z = s0.body_velocity + np.array([0.2, -0.1, 0.05])
    r = np.diag([0.04, 0.09, 0.01])
    h = ekf.measurement_jacobian()
    res = ekf.update_velocity(z, r, stamp=1.5)
    s = h @ p @ h.T + r
    k = p @ h.T @ np.linalg.inv(s)
    dx = k @ (z - s0.body_velocity)
    p_joseph = (np.eye(DIM) - k @ h) @ p @ (np.eye(DIM) - k @ h).T + k @ r @ k.T
    jr = np.eye(DIM)
    jr[ROT, ROT] = right_jacobian(dx[ROT])
    np.testing.assert_allclose(res.innovation_cov, s, rtol=1e-12)
    assert res.nis == pytest.approx(float((z - s0.body_velocity) @ np.linalg.solve(s, z - s0.body_velocity)))
    np.testing.assert_allclose(_minus(ekf.state, s0), dx, atol=1e-12)
    np.testing.assert_allclose(ekf.covariance, jr @ p_joseph @ jr.T, rtol=1e-10, atol=1e-16)
    assert res.stamp == 1.5 and res.accepted
    np.testing.assert_allclose(res.vel_body, ekf.state.rot.T @ ekf.state.vel)
    hp = ekf.measurement_jacobian()[:, 0:6]
    np.testing.assert_allclose(res.vel_body_cov, hp @ ekf.covariance[0:6, 0:6] @ hp.T)
    # the posterior body velocity is pulled toward z and is more certain than the prior
    assert np.linalg.norm(res.vel_body - z) < np.linalg.norm(s0.body_velocity - z)
    assert np.all(np.linalg.eigvalsh(ekf.covariance) > 0)


def test_gate_rejects_outlier_only_when_enabled() -> None:
    s0 = generic_state()
    z = s0.body_velocity + np.array([50.0, 0.0, 0.0])
    r = np.eye(3) * 0.01
    gated = ErrorStateEkf(EkfConfig(gate_enabled=True, gate_threshold=16.27), s0)
    res = gated.update_velocity(z, r)
    assert not res.accepted and res.nis > 16.27
    np.testing.assert_array_equal(gated.state.vel, s0.vel)
    ungated = ErrorStateEkf(EkfConfig(), s0)
    assert ungated.update_velocity(z, r).accepted
    assert not np.allclose(ungated.state.vel, s0.vel)


def test_update_rejects_invalid_inputs_with_named_field() -> None:
    ekf = ErrorStateEkf(EkfConfig(), generic_state())
    with pytest.raises(ValueError, match="z_body"):
        ekf.update_velocity(np.array([np.nan, 0, 0]), np.eye(3))
    with pytest.raises(ValueError, match="meas_cov"):
        ekf.update_velocity(np.zeros(3), -np.eye(3))


def test_pose_covariance_ros_order_and_world_rotation() -> None:
    s0 = generic_state()
    ekf = ErrorStateEkf(EkfConfig(init_sigma_pos=0.3, init_sigma_rot=0.02, init_sigma_yaw=0.5), s0)
    pc = ekf.pose_covariance_ros()
    np.testing.assert_allclose(pc[0:3, 0:3], np.eye(3) * 0.09)
    # rotation block back in world axes: diag(σ_rp², σ_rp², σ_yaw²)
    np.testing.assert_allclose(pc[3:6, 3:6], np.diag([0.02**2, 0.02**2, 0.5**2]), atol=1e-15)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="acc_noise_density"):
        EkfConfig(acc_noise_density=-1.0)
    with pytest.raises(ValueError, match="history_length"):
        EkfConfig(history_length=float("nan"))


def test_velocity_noise_floor_adds_its_variance_to_every_measurement() -> None:
    """``velocity_noise_floor`` σ₀: the update is the plain one with R + σ₀² I, the recorded S included."""
    s0 = generic_state()
    z = s0.body_velocity + np.array([0.2, -0.1, 0.05])
    r = np.diag([0.04, 0.09, 0.01])
    floored = ErrorStateEkf(EkfConfig(velocity_noise_floor=0.3), s0)
    plain = ErrorStateEkf(EkfConfig(), s0)
    a = floored.update_velocity(z, r)
    b = plain.update_velocity(z, r + np.eye(3) * 0.09)
    np.testing.assert_allclose(a.innovation_cov, b.innovation_cov, rtol=1e-14)
    np.testing.assert_allclose(floored.covariance, plain.covariance, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(floored.state.vel, plain.state.vel, rtol=1e-14)
    assert a.nis < ErrorStateEkf(EkfConfig(), s0).update_velocity(z, r).nis  # a floor trusts z less
