"""The block propagation gives the one-interval-at-a-time state and covariance (to round-off).

Both run the same functions (:func:`velobins_ekf.nominal.nominal_step` and those of
:mod:`velobins_ekf.propagation`, on one interval or on a block with a leading axis);
``test_ekf_core`` checks their Jacobians against numerical differentiation one interval at a
time, and these tests carry that check over to blocks, where the nominal chain is a scan
(:mod:`velobins_ekf.batch`) and the covariance steps are folded by ``compose``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_ekf.batch import prefix_products, propagate_block
from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import ErrorStateEkf, NavState
from velobins_ekf.nominal import nominal_step, rotation_series
from velobins_ekf.propagation import (
    EXP_HALF,
    Interval,
    compose,
    interval_series,
    transition_and_noise,
)
from velobins_ekf.so3 import SMALL_ANGLE, exp_coefficients, right_jacobian, so3_exp


def _state() -> NavState:
    return NavState(
        Rotation.from_rotvec([0.4, -0.2, 2.0]).as_matrix(),
        np.array([1.0, -2.0, 0.5]),
        np.array([10.0, -3.0, 2.0]),
        np.array([0.05, -0.03, 0.08]),
        np.array([0.01, -0.02, 0.015]),
    )


def _imu(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Aggressive manoeuvres (rates up to ~6 rad/s), jittered dt, and a stretch of near-zero rate
    (the small-angle series branch)."""
    rng = np.random.default_rng(seed)
    dt = 1e-3 * (1.0 + 0.3 * rng.random(n))
    acc = np.array([0.0, 0.0, 9.81]) + 3.0 * rng.standard_normal((n, 3))
    gyro = 3.0 * rng.standard_normal((n, 3))
    gyro[n // 3 : n // 3 + 20] = _state().gyro_bias + 1e-5 * rng.standard_normal((20, 3))
    return dt, acc, gyro


def _run(read_every: int | None, n: int = 700) -> ErrorStateEkf:
    """Propagate ``n`` intervals, reading state and covariance every ``read_every`` samples."""
    ekf = ErrorStateEkf(EkfConfig(), _state())
    dt, acc, gyro = _imu(n)
    for i in range(n):
        ekf.propagate(dt[i], acc[i], gyro[i])
        if read_every is not None and (i + 1) % read_every == 0:
            _ = ekf.state, ekf.cov
    ekf.flush()
    return ekf


@pytest.mark.parametrize("read_every", [3, 50, None], ids=["per-sample", "every-50", "never"])
def test_batched_and_per_sample_paths_agree(read_every: int | None) -> None:
    ref = _run(read_every=1)  # every flush holds one interval: one interval at a time throughout
    out = _run(read_every)
    np.testing.assert_allclose(out.state.rot, ref.state.rot, atol=1e-12)
    np.testing.assert_allclose(out.state.vel, ref.state.vel, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(out.state.pos, ref.state.pos, rtol=1e-11, atol=1e-11)
    scale = np.sqrt(np.outer(np.diag(ref.cov), np.diag(ref.cov)))
    np.testing.assert_allclose(out.cov / scale, ref.cov / scale, atol=1e-10)
    np.testing.assert_allclose(out.transition_matrix(), ref.transition_matrix(), atol=1e-13)
    q_out, q_ref = out.process_noise(), ref.process_noise()
    q_scale = np.sqrt(np.outer(np.diag(q_ref), np.diag(q_ref)))
    np.testing.assert_allclose(q_out / q_scale, q_ref / q_scale, atol=1e-12)


def test_block_functions_equal_the_one_interval_ones_row_by_row() -> None:
    """``propagate_block`` and ``transition_and_noise`` on a block equal ``nominal_step`` and
    ``transition_and_noise`` on each of its intervals, and the block's per-interval poses equal the
    state after each step."""
    cfg = EkfConfig()
    dt, acc, gyro = _imu(40, seed=3)
    block_state, step_state = _state(), _state()
    block, poses = propagate_block(block_state, cfg.gravity, np.column_stack((dt, acc, gyro)))
    f, q = transition_and_noise(block, cfg)
    for k in range(40):
        series = rotation_series(float(dt[k]), gyro[k], step_state.gyro_bias)
        st = step_state
        one = nominal_step(st.rot, st.vel, st.pos, acc[k] - st.acc_bias, series, float(dt[k]), cfg.gravity)
        st.rot, st.vel, st.pos = one.rot, one.vel, one.pos
        np.testing.assert_allclose(one.r_mid, block.r_mid[k], atol=1e-12)
        np.testing.assert_allclose(series, block.series[k], rtol=1e-14, atol=1e-18)
        np.testing.assert_allclose(poses.rot[k], step_state.rot, atol=1e-12)
        np.testing.assert_allclose(poses.vel[k], step_state.vel, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(poses.pos[k], step_state.pos, rtol=1e-12, atol=1e-12)
        if k in (0, 17, 39):
            single = Interval(float(block.dt[k]), block.r_mid[k], block.acc[k], block.series[k])
            f_one, q_one = transition_and_noise(single, cfg)
            np.testing.assert_allclose(f_one, f[k], atol=1e-14)
            q_scale = np.sqrt(np.outer(np.diag(q[k]), np.diag(q[k])))
            np.testing.assert_allclose(q_one / q_scale, q[k] / q_scale, atol=1e-13)
    np.testing.assert_allclose(block_state.rot, step_state.rot, atol=1e-12)
    np.testing.assert_allclose(block_state.vel, step_state.vel, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(block_state.pos, step_state.pos, rtol=1e-12, atol=1e-12)


def test_interval_series_are_the_so3_reference_matrices() -> None:
    """The five series of :func:`interval_series` against ``so3_exp`` / ``right_jacobian``."""
    dt = 2e-3
    for h in (np.array([0.3, -0.2, 0.5]), np.array([2e-5, -1e-5, 3e-5])):
        s = interval_series(dt, *(float(x) for x in h))
        np.testing.assert_allclose(s[EXP_HALF], so3_exp(h), atol=1e-15)
        np.testing.assert_allclose(s[1], so3_exp(2 * h).T, atol=1e-15)
        np.testing.assert_allclose(s[2], -dt * right_jacobian(2 * h), atol=1e-17)
        np.testing.assert_allclose(s[3], -dt * so3_exp(h).T, atol=1e-17)
        np.testing.assert_allclose(s[4], 0.5 * dt * dt * right_jacobian(h), atol=1e-20)


def test_compose_equals_sequential_steps_for_any_length() -> None:
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 8, 33):
        f = np.eye(15) + 0.1 * rng.standard_normal((n, 15, 15))
        lq = rng.standard_normal((n, 15, 15))
        q = lq @ lq.transpose(0, 2, 1)
        p0 = np.eye(15) * 0.5
        p = p0.copy()
        for k in range(n):
            p = f[k] @ p @ f[k].T + q[k]
        phi, q_sum = compose(f, q)
        np.testing.assert_allclose(phi @ p0 @ phi.T + q_sum, p, rtol=1e-11, atol=1e-11)


def test_prefix_products_and_coefficients() -> None:
    rng = np.random.default_rng(2)
    m = Rotation.random(13, random_state=4).as_matrix()
    s = prefix_products(m)
    acc = np.eye(3)
    for k in range(13):
        acc = acc @ m[k]
        np.testing.assert_allclose(s[k], acc, atol=1e-14)
    theta2 = np.concatenate([[0.0, (0.5 * SMALL_ANGLE) ** 2, (0.999 * SMALL_ANGLE) ** 2], rng.random(20) * 9.0])
    a, b, c = exp_coefficients(theta2)  # the array form
    for i, t2 in enumerate(theta2):
        np.testing.assert_allclose((a[i], b[i], c[i]), exp_coefficients(float(t2)), rtol=1e-14)


def test_reset_discards_queued_intervals() -> None:
    ekf = ErrorStateEkf(EkfConfig(), _state())
    dt, acc, gyro = _imu(30)
    for i in range(30):
        ekf.propagate(dt[i], acc[i], gyro[i])
    ekf.reset(_state())
    np.testing.assert_array_equal(ekf.state.pos, _state().pos)
    fresh = ErrorStateEkf(EkfConfig(), _state())
    np.testing.assert_array_equal(ekf.cov, fresh.cov)
