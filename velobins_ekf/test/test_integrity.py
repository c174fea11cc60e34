"""Input integrity of the streaming filter: IMU gaps and stamp jumps hold it, a wrong IMU unit or frame
is named (before initialisation and while running), and the start/reset/set_pose API."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ekf_oracles import AnalyticTrajectory, simulate_imu
from scipy.spatial.transform import Rotation

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import NavState
from velobins_ekf.integrity import SpecificForceMonitor, check_specific_force, gap_inflation
from velobins_ekf.runner import VelocityEkf
from velobins_ekf.state import POS, VEL

G = EkfConfig().gravity
LEVEL = np.array([0.0, 0.0, G])
TRAJ = AnalyticTrajectory()
RATE = 200.0


def _faults(f_mean: np.ndarray) -> str | None:
    fault = check_specific_force(f_mean, float(np.linalg.norm(f_mean)), EkfConfig())
    return None if fault is None else fault.cause


def test_specific_force_check_names_the_likely_cause() -> None:
    tilted = Rotation.from_euler("xy", [0.4, -0.3]).as_matrix().T @ LEVEL
    assert _faults(LEVEL) is None and _faults(tilted) is None and _faults(1.4 * LEVEL) is None
    assert _faults(LEVEL / G) == "imu_in_g"  # 1.0: the driver left g
    assert _faults(np.array([0.0, 0.0, -G])) == "imu_frd_as_flu"  # y and z flipped
    assert _faults(np.array([0.0, -0.1, -G])) == "imu_frd_as_flu"
    assert _faults(LEVEL * 1000.0 / G) == "imu_force_high"  # mg
    assert _faults(np.zeros(3)) == "imu_force_low"
    assert _faults(np.array([G, 0.0, 0.0])) == "imu_tilted"  # 90° off: mounted sideways
    unsteady = check_specific_force(np.array([0.0, 0.0, 1.0]), G, EkfConfig())  # half FLU, half FRD samples
    assert unsteady is not None and unsteady.cause == "imu_unsteady"
    msg = check_specific_force(np.array([0.0, 0.0, -G]), G, EkfConfig()).message
    assert "FRD" in msg and "imu_to_body" in msg


def _flight(duration: float, seed: int = 3):
    """A simulated aggressive flight (ekf_oracles): stamps, IMU, 20 Hz body velocities, initial state."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration, 1.0 / RATE)
    tr = TRAJ.sample(t)
    imu = simulate_imu(tr, EkfConfig(), rng)
    s0 = NavState(tr.rot[0].copy(), tr.vel[0].copy(), tr.pos[0].copy(), np.zeros(3), np.zeros(3))
    return t, imu, tr, s0


def test_running_check_stays_quiet_on_a_flight_and_flags_g_units_and_frd() -> None:
    t, imu, _, _ = _flight(6.0)
    for transform, cause in (
        (lambda a: a, None),
        (lambda a: a / G, "imu_in_g"),
        (lambda a: a * [1, -1, -1], "imu_frd_as_flu"),
    ):
        mon = SpecificForceMonitor(EkfConfig())
        verdicts = [mon.add(float(ti), *transform(a)) for ti, a in zip(t, imu.acc, strict=True)]
        assert mon.windows == 5
        assert {None if v is None else v.cause for v in verdicts[int(RATE) + 1 :]} == {cause}


def _feed_imu(f: VelocityEkf, t, acc, gyro) -> None:
    for ti, a, w in zip(t, acc, gyro, strict=True):
        f.add_imu(float(ti), a, w)


@pytest.mark.parametrize(
    "transform,cause", [(lambda a: a / G, "imu_in_g"), (lambda a: a * [1, -1, -1], "imu_frd_as_flu")]
)
def test_self_initialisation_refuses_an_implausible_imu_and_names_it(transform, cause) -> None:
    n = 100
    acc, gyro = np.tile(transform(LEVEL), (n, 1)), np.zeros((n, 3))
    for mode in ("align", "align_at_rest"):
        f = VelocityEkf(EkfConfig(init_window=0.2))
        for i in range(n):
            f.add_imu(i * 0.005, acc[i], gyro[i])
            if mode == "align" and i % 10 == 9:
                assert not f.add_velocity(i * 0.005, np.zeros(3), np.eye(3) * 0.01)
            elif mode == "align_at_rest":
                assert not f.align_at_rest()
        assert not f.initialized and f.imu_fault is not None and f.imu_fault.cause == cause, mode
        assert f.stats.init_refused > 0
    # the same IMU in m/s² and FLU starts at rest, level, at the newest sample
    f = VelocityEkf(EkfConfig(init_window=0.2))
    for i in range(41):
        f.add_imu(i * 0.005, LEVEL, np.zeros(3))
        started = f.align_at_rest()
        assert started == (i == 40)
    assert f.time == pytest.approx(0.2) and f.imu_fault is None and f.stats.initialisations == 1
    np.testing.assert_allclose(f.state.rot, np.eye(3), atol=1e-12)
    np.testing.assert_array_equal(f.state.vel, np.zeros(3))


def test_running_filter_flags_an_imu_in_g() -> None:
    t, imu, _, s0 = _flight(3.0)
    f = VelocityEkf(EkfConfig())
    f.initialize(0.0, s0)
    _feed_imu(f, t, imu.acc / G, imu.gyro)
    assert f.imu_fault is not None and f.imu_fault.cause == "imu_in_g"


@pytest.mark.parametrize("jump", [0.5, 10.0])
def test_a_gap_or_forward_jump_holds_the_filter_and_never_propagates_across_it(jump: float) -> None:
    """The filter keeps its state over the gap (no propagation over ``jump`` seconds: for a 10 s
    clock jump that was 66 m), grows its covariance by ``gap_inflation``, drops what is stamped
    inside the gap and goes on propagating from the new stamp."""
    t, imu, _, s0 = _flight(4.0)
    cut = int(2.0 * RATE)
    ref = VelocityEkf(EkfConfig())
    ref.initialize(0.0, s0)
    _feed_imu(ref, t[:cut], imu.acc[:cut], imu.gyro[:cut])
    before, cov_before = ref.state, ref.covariance
    f = VelocityEkf(EkfConfig())
    f.initialize(0.0, s0)
    _feed_imu(f, t[:cut], imu.acc[:cut], imu.gyro[:cut])
    t_after = t[cut - 1] + jump
    assert f.add_velocity(t[cut - 1] + 0.5 * jump, before.rot.T @ before.vel, np.eye(3) * 0.01)  # waits: inside
    assert f.add_imu(t_after, imu.acc[cut], imu.gyro[cut])
    assert f.stats.imu_gaps == 1 and f.stats.meas_in_gap == 1 and f.stats.meas_applied == 0
    assert f.pop_holds() == [(pytest.approx(t[cut - 1]), pytest.approx(t_after))] and f.pop_holds() == []
    np.testing.assert_array_equal(f.state.pos, before.pos)
    np.testing.assert_array_equal(f.state.vel, before.vel)
    np.testing.assert_allclose(f.covariance, cov_before + gap_inflation(before, f.config, jump), rtol=1e-12)
    assert math.sqrt(f.covariance[POS, POS][0, 0]) >= np.linalg.norm(before.vel) * jump  # says what it missed
    # afterwards: ordinary propagation, one IMU interval at a time
    assert f.add_imu(t_after + 1.0 / RATE, imu.acc[cut + 1], imu.gyro[cut + 1])
    moved = np.linalg.norm(f.state.pos - before.pos)
    assert moved <= (np.linalg.norm(before.vel) + 1.0) / RATE
    assert f.time == pytest.approx(t_after + 1.0 / RATE)
    assert f.add_velocity(f.time + 0.001, before.rot.T @ before.vel, np.eye(3) * 0.01)
    assert f.add_imu(f.time + 0.005, imu.acc[cut + 2], imu.gyro[cut + 2]) and f.stats.meas_applied == 1
    # a measurement from before the gap cannot be re-propagated across it
    assert not f.add_velocity(t[cut - 10], np.zeros(3), np.eye(3) * 0.01) and f.stats.meas_too_old == 1


def _nis_after_gap(config: EkfConfig, gap: float, seed: int) -> np.ndarray:
    """NIS of the 20 Hz velocity updates after an IMU (and measurement) gap of ``gap`` s at 3 s of an
    aggressive 8 s flight, the filter started from ground truth."""
    t, imu, tr, s0 = _flight(8.0, seed)
    f = VelocityEkf(config, keep_updates=True)
    f.initialize(0.0, s0)
    rng = np.random.default_rng(1)
    g0, g1 = round(3.0 * RATE), round((3.0 + gap) * RATE)
    for k in [*range(g0 + 1), *range(g1, t.size)]:
        f.add_imu(t[k], imu.acc[k], imu.gyro[k])
        if k % 10 == 0:
            f.add_velocity(t[k], tr.rot[k].T @ tr.vel[k] + rng.normal(0.0, 0.05, 3), np.eye(3) * 0.05**2)
    assert f.stats.imu_gaps == 1
    return np.array([u.nis for u in f.pop_updates() if u.stamp >= t[g1]])


def test_a_hold_grows_velocity_and_attitude_by_what_the_gap_can_hide() -> None:
    """The updates after a hold are consistent only if its covariance covers what the vehicle did in the
    gap. Over a 0.3 s gap of this aggressive flight, with the initial σ alone (gap_accel_sigma =
    gap_rate_sigma = 0: the hold before them) the first update's NIS is about 100 and the mean NIS of the
    node's 60-update window after the gap exceeds its alarm (4.07); grown by the defaults, both are
    consistent. (A 0.5 s gap of this flight needs more than the defaults, set from NanoBench's gentler
    flights: benchmarks/bench_gap_hold.py.)"""
    alarm = 4.073
    before = _nis_after_gap(EkfConfig(gap_accel_sigma=0.0, gap_rate_sigma=0.0), 0.3, 3)
    after = _nis_after_gap(EkfConfig(), 0.3, 3)
    assert before[0] > 50.0 and before[:60].mean() > alarm
    assert after[0] < 16.27 and after[:60].mean() < alarm  # χ²₃ 99.9 %
    cov = gap_inflation(NavState(np.eye(3), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3)), EkfConfig(), 10.0)
    assert np.sqrt(cov[0, 0]) == pytest.approx(math.hypot(EkfConfig().init_sigma_rot, 0.5))  # capped: 0.5 rad
    assert np.sqrt(cov[3, 3]) == pytest.approx(math.hypot(EkfConfig().init_sigma_vel, 10.0 * 1.0))


def test_intervals_up_to_max_imu_interval_propagate() -> None:
    t, imu, _, s0 = _flight(1.0)
    f = VelocityEkf(EkfConfig(max_imu_interval=0.1))
    f.initialize(0.0, s0)
    keep = np.r_[0:50, 65 : t.size]  # 15 samples lost: a 80 ms interval
    _feed_imu(f, t[keep], imu.acc[keep], imu.gyro[keep])
    assert f.stats.imu_gaps == 0 and f.time == pytest.approx(t[-1])


def _run_with_pose(arrives_at: int, stamp_at: int, t_pose: float | None = "stamp") -> VelocityEkf:
    """A 3 s flight with 20 Hz velocities and a set_pose whose pose is the truth at sample ``stamp_at``,
    handed to the filter right after IMU sample ``arrives_at`` (stamped ``t[stamp_at]`` unless ``t_pose``)."""
    t, imu, tr, s0 = _flight(3.0)
    f = VelocityEkf(EkfConfig())
    f.initialize(0.0, s0)
    rng = np.random.default_rng(1)
    rot_err = Rotation.from_euler("z", 0.3).as_matrix()  # the filter's yaw is off; set_pose fixes it
    f.ekf.reset(NavState(rot_err @ s0.rot, rot_err @ s0.vel, s0.pos, np.zeros(3), np.zeros(3)))
    cov6 = np.diag([1e-4, 1e-4, 1e-4, 1e-6, 1e-6, 1e-6])
    for k in range(t.size):
        f.add_imu(t[k], imu.acc[k], imu.gyro[k])
        if k % 10 == 0:
            z = tr.rot[k].T @ tr.vel[k] + rng.normal(0.0, 0.05, 3)
            f.add_velocity(t[k], z, np.eye(3) * 0.05**2)
        if k == arrives_at:
            stamp = t[stamp_at] if t_pose == "stamp" else t_pose
            f.set_pose(tr.pos[stamp_at], tr.rot[stamp_at], cov6, t=stamp)
    return f


@pytest.mark.parametrize("arrives_at", [200, 240, 299, 300, 340])
def test_a_pose_is_set_at_its_stamp_however_late_or_early_it_arrives(arrives_at: int) -> None:
    """A pose that arrives up to 0.5 s late or ahead of its IMU lands where an in-order one does, so its
    latency leaves no attitude error behind (set at the arrival instead, the filter's yaw would be off by
    the turn in between and the velocity updates would fight it: the live fault test's failure mode)."""
    ref = _run_with_pose(300, 300)
    f = _run_with_pose(arrives_at, 300)
    assert f.stats.pose_sets == 1 and f.stats.pose_stale == 0
    np.testing.assert_allclose(f.state.rot, ref.state.rot, atol=1e-9)
    np.testing.assert_allclose(f.state.pos, ref.state.pos, atol=1e-9)
    np.testing.assert_allclose(f.covariance, ref.covariance, atol=1e-12)
    stale = _run_with_pose(500, 10)  # 2.45 s older than the state: before the stored history
    assert stale.stats.pose_stale == 1 and stale.stats.pose_sets == 1
    now = _run_with_pose(500, 10, t_pose=None)  # no stamp: set at the state time, the same result
    assert now.stats.pose_stale == 0
    np.testing.assert_allclose(stale.state.rot, now.state.rot, atol=1e-12)
    other_clock = _run_with_pose(300, 300, t_pose=1.0e9)  # would wait forever: set now, counted
    assert other_clock.stats.pose_stale == 1 and other_clock.stats.pose_sets == 1


def test_a_waiting_pose_is_not_evicted_by_velocities_overflowing_the_queue() -> None:
    """``max_pending`` bounds the velocities waiting for the IMU; a pose set waiting among them stays."""
    t, imu, _, s0 = _flight(1.0)
    f = VelocityEkf(EkfConfig(max_pending=3))
    f.initialize(0.0, s0)
    f.add_imu(t[1], imu.acc[1], imu.gyro[1])
    assert f.set_pose(np.ones(3), np.eye(3), t=t[20])  # ahead of the IMU: waits, the oldest pending event
    for k in range(30, 35):
        f.add_velocity(t[k], np.zeros(3), np.eye(3) * 0.01)
    assert f.stats.meas_pending_overflow == 2 and f.stats.pose_sets == 0
    for k in range(2, 25):
        f.add_imu(t[k], imu.acc[k], imu.gyro[k])
    assert f.stats.pose_sets == 1 and f.stats.pose_stale == 0


def test_set_pose_keeps_body_velocity_and_biases_and_restart_keeps_counters() -> None:
    t, imu, _, s0 = _flight(1.0)
    f = VelocityEkf(EkfConfig())
    f.initialize(0.0, s0)
    _feed_imu(f, t, imu.acc, imu.gyro)
    body, p_vel, rot0 = f.velocity_body, f.covariance[VEL, VEL], f.state.rot
    rot = Rotation.from_euler("z", 1.0).as_matrix()
    cov6 = np.diag([1.0, 2.0, 3.0, 0.01, 0.02, 0.03])
    f.set_pose(np.array([5.0, 6.0, 7.0]), rot, cov6)
    np.testing.assert_allclose(f.state.pos, [5.0, 6.0, 7.0])
    np.testing.assert_allclose(f.state.rot, rot, atol=1e-12)
    np.testing.assert_allclose(f.velocity_body, body, atol=1e-12)  # the observed, body-frame velocity is kept
    np.testing.assert_allclose(f.pose_covariance_ros(), cov6, atol=1e-12)  # about the odom axes again
    turn = rot @ rot0.T
    np.testing.assert_allclose(f.covariance[VEL, VEL], turn @ p_vel @ turn.T, atol=1e-12)
    assert np.all(f.covariance[POS, VEL] == 0.0) and f.stats.pose_sets == 1
    f.set_pose(np.zeros(3), np.eye(3), np.zeros((6, 6)))  # ros2 topic pub's default zeros: initial sigmas
    assert f.covariance[POS, POS][0, 0] == pytest.approx(f.config.init_sigma_pos**2)
    used = f.stats.imu_used
    f.restart()
    assert not f.initialized and f.stats.restarts == 1 and f.stats.imu_used == used
    f.add_imu(10.0, LEVEL, np.zeros(3))
    f.set_pose(np.ones(3), np.eye(3))  # not initialised: starts at rest at the newest IMU stamp
    assert f.initialized and f.time == 10.0 and f.stats.initialisations == 2
    np.testing.assert_array_equal(f.state.vel, np.zeros(3))
