"""Time handling of VelocityEkf: interpolation, late measurements, rejection counters, start-up."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ekf_oracles import AnalyticTrajectory, simulate_imu
from scipy.spatial.transform import Rotation

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import NavState
from velobins_ekf.initial_state import gravity_aligned_rotation
from velobins_ekf.runner import VelocityEkf

TRAJ = AnalyticTrajectory()
RATE = 200.0


def _flight(duration: float = 3.0, seed: int = 3):
    rng = np.random.default_rng(seed)
    cfg = EkfConfig()
    t = np.arange(0.0, duration, 1.0 / RATE)
    tr = TRAJ.sample(t)
    imu = simulate_imu(tr, cfg, rng)
    tm = np.arange(0.05, duration - 0.2, 0.05) + 0.0013  # between IMU samples
    z = TRAJ.sample(tm).body_velocity + rng.standard_normal((tm.size, 3)) * 0.05
    cov = np.eye(3) * 0.05**2
    s0 = NavState(tr.rot[0].copy(), tr.vel[0].copy(), tr.pos[0].copy(), np.zeros(3), np.zeros(3))
    return t, imu, tm, z, cov, s0


def _filter(s0: NavState, t0: float, **cfg) -> VelocityEkf:
    f = VelocityEkf(EkfConfig(**cfg))
    f.initialize(t0, s0)
    return f


def _run_in_order(t, imu, tm, z, cov, s0) -> VelocityEkf:
    f = _filter(s0, t[0])
    j = 0
    for i in range(t.size):
        while j < tm.size and tm[j] <= t[i]:
            assert f.add_velocity(tm[j], z[j], cov)
            j += 1
        assert f.add_imu(t[i], imu.acc[i], imu.gyro[i])
    return f


def _assert_same(a: VelocityEkf, b: VelocityEkf) -> None:
    np.testing.assert_allclose(a.state.pos, b.state.pos, atol=1e-9)
    np.testing.assert_allclose(a.state.vel, b.state.vel, atol=1e-9)
    np.testing.assert_allclose(a.state.rot, b.state.rot, atol=1e-9)
    np.testing.assert_allclose(a.ekf.cov, b.ekf.cov, atol=1e-12)
    assert [u.stamp for u in a.updates] == [u.stamp for u in b.updates]
    for ua, ub in zip(a.updates, b.updates, strict=True):
        np.testing.assert_allclose(ua.innovation, ub.innovation, atol=1e-9)


def test_measurement_between_imu_samples_is_applied_at_its_stamp() -> None:
    t, imu, _, z, cov, s0 = _flight(duration=0.5)
    f = _filter(s0, t[0])
    f.add_imu(t[0], imu.acc[0], imu.gyro[0])
    f.add_imu(t[1], imu.acc[1], imu.gyro[1])
    t_m = 0.5 * (t[1] + t[2])
    assert f.add_velocity(t_m, z[0], cov)
    assert f.updates == [] and f.time == t[1]  # waits for the IMU to pass its stamp
    f.add_imu(t[2], imu.acc[2], imu.gyro[2])
    assert [u.stamp for u in f.updates] == [t_m] and f.time == t[2]
    # same as stepping the core by hand: propagate to t_m with the interpolated sample, update, go on
    g = _filter(s0, t[0])
    g.add_imu(t[0], imu.acc[0], imu.gyro[0])
    g.add_imu(t[1], imu.acc[1], imu.gyro[1])
    mid_acc, mid_gyro = 0.5 * (imu.acc[1] + imu.acc[2]), 0.5 * (imu.gyro[1] + imu.gyro[2])
    g.ekf.propagate(t_m - t[1], 0.5 * (imu.acc[1] + mid_acc), 0.5 * (imu.gyro[1] + mid_gyro))
    g.ekf.update_velocity(z[0], cov)
    g.ekf.propagate(t[2] - t_m, 0.5 * (mid_acc + imu.acc[2]), 0.5 * (mid_gyro + imu.gyro[2]))
    np.testing.assert_allclose(f.state.vel, g.ekf.state.vel, atol=1e-12)
    np.testing.assert_allclose(f.ekf.cov, g.ekf.cov, atol=1e-15)


def test_late_measurements_give_the_in_order_result() -> None:
    t, imu, tm, z, cov, s0 = _flight()
    ref = _run_in_order(t, imu, tm, z, cov, s0)
    # each measurement arrives 0.13 s late, and every other pair swapped
    arrive = tm + 0.13
    arrive[1::4], arrive[2::4] = arrive[2::4].copy(), arrive[1::4].copy()
    late = _filter(s0, t[0])
    order = np.argsort(arrive, kind="stable")
    j = 0
    for i in range(t.size):
        while j < order.size and arrive[order[j]] <= t[i]:
            m = order[j]
            assert late.add_velocity(tm[m], z[m], cov)
            j += 1
        late.add_imu(t[i], imu.acc[i], imu.gyro[i])
    assert late.stats.meas_late == tm.size and late.stats.meas_applied == tm.size
    assert late.stats.meas_too_old == 0
    _assert_same(ref, late)
    records = late.pop_updates()
    assert len(records) == tm.size and late.updates == []


def test_too_old_measurement_is_dropped_and_counted() -> None:
    t, imu, _, z, cov, s0 = _flight(duration=2.0)
    f = _filter(s0, t[0], history_length=0.5)
    for i in range(t.size):
        f.add_imu(t[i], imu.acc[i], imu.gyro[i])
    before = f.state
    assert not f.add_velocity(t[-1] - 1.0, z[0], cov)
    assert f.stats.meas_too_old == 1 and f.stats.meas_applied == 0
    np.testing.assert_array_equal(f.state.vel, before.vel)
    # inside the history it is applied
    assert f.add_velocity(t[-1] - 0.3, z[0], cov)
    assert f.stats.meas_late == 1 and f.stats.meas_applied == 1


def test_invalid_inputs_are_rejected_counted_and_never_reach_the_state() -> None:
    t, imu, _, z, cov, s0 = _flight(duration=1.0)
    f = _filter(s0, t[0])
    for i in range(t.size):
        assert f.add_imu(t[i], imu.acc[i], imu.gyro[i])
        if i == 50:
            assert not f.add_imu(t[i] + 1e-4, [np.nan, 0.0, 9.8], imu.gyro[i])
            assert not f.add_imu(t[i] + 2e-4, imu.acc[i], [0.0, np.inf, 0.0])
            assert not f.add_imu(math.nan, imu.acc[i], imu.gyro[i])
            assert not f.add_imu(t[i], imu.acc[i], imu.gyro[i])  # duplicate stamp
            assert not f.add_imu(t[i] - 0.01, imu.acc[i], imu.gyro[i])  # older than the last
    s = f.stats
    assert (s.imu_nonfinite, s.imu_duplicate, s.imu_out_of_order, s.imu_used) == (3, 1, 1, t.size)
    assert not f.add_velocity(0.5, [np.nan, 0, 0], cov)
    assert not f.add_velocity(0.5, z[0], np.diag([0.01, -0.01, 0.01]))
    assert not f.add_velocity(0.5, z[0], np.array([[0.01, 0.005, 0], [0, 0.01, 0], [0, 0, 0.01]]))
    assert f.add_velocity(0.5, z[0], cov)
    assert not f.add_velocity(0.5, z[1], cov)  # duplicate stamp
    s = f.stats
    assert (s.meas_nonfinite, s.meas_bad_covariance, s.meas_duplicate, s.meas_applied) == (1, 2, 1, 1)
    st = f.state
    assert all(np.all(np.isfinite(a)) for a in (st.rot, st.vel, st.pos, f.ekf.cov))
    # the dropped samples changed nothing: the same stream without them gives the same state
    g = _filter(s0, t[0])
    for i in range(t.size):
        g.add_imu(t[i], imu.acc[i], imu.gyro[i])
    g.add_velocity(0.5, z[0], cov)
    np.testing.assert_allclose(f.state.pos, g.state.pos, atol=1e-12)


def test_measurements_ahead_of_imu_wait_and_overflow_is_counted() -> None:
    t, imu, _, z, cov, s0 = _flight(duration=0.5)
    f = _filter(s0, t[0], max_pending=2)
    for k in range(3):
        assert f.add_velocity((0.10, 0.11, 0.12)[k], z[k], cov)
    assert f.stats.meas_pending_overflow == 1 and f.updates == []
    for i in range(t.size):
        f.add_imu(t[i], imu.acc[i], imu.gyro[i])
    assert [u.stamp for u in f.updates] == [0.11, 0.12]  # the oldest waiting one was dropped


def test_self_initialisation_by_gravity_alignment() -> None:
    rot = Rotation.from_euler("ZYX", [0.8, 0.2, -0.3]).as_matrix()
    g = EkfConfig().gravity
    f_body = rot.T @ np.array([0.0, 0.0, g])
    f = VelocityEkf(EkfConfig(init_window=0.2, init_yaw=0.8))
    assert not f.add_velocity(0.0, np.zeros(3), np.eye(3) * 0.01)  # no IMU yet
    assert f.stats.meas_before_init == 1
    for i in range(60):
        f.add_imu(i * 0.005, f_body, np.zeros(3))
    v_body = np.array([0.5, -0.2, 0.1])
    assert f.add_velocity(0.3, v_body, np.eye(3) * 0.01)
    assert f.initialized
    np.testing.assert_allclose(f.state.rot, rot, atol=1e-12)
    np.testing.assert_allclose(f.state.rot.T @ f.state.vel, v_body, atol=1e-12)
    np.testing.assert_allclose(f.velocity_body, v_body, atol=1e-12)
    assert f.time == pytest.approx(59 * 0.005)
    assert f.quaternion[3] >= 0 and f.pose_covariance_ros().shape == (6, 6) and f.covariance.shape == (15, 15)


@pytest.mark.parametrize("yaw", [0.0, 1.0])
def test_gravity_alignment_recovers_roll_pitch(yaw: float) -> None:
    rot = Rotation.from_euler("ZYX", [yaw, -0.4, 0.7]).as_matrix()
    r = gravity_aligned_rotation(rot.T @ np.array([0.0, 0.0, 9.81]), yaw=yaw)
    np.testing.assert_allclose(r, rot, atol=1e-12)
    with pytest.raises(ValueError, match="too small"):
        gravity_aligned_rotation(np.array([0.0, 0.0, 0.1]), gravity=9.81)
