"""Metrics on hand-checkable cases (paper §IV-A definitions, see velobins_eval.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_eval import metrics as m


def _line(n: int = 201, dt: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(n) * dt
    p = np.stack([np.sin(t), 0.5 * t, np.cos(0.3 * t)], axis=1)
    return t, p


def test_ave_zero_and_constant_offset() -> None:
    v = np.random.default_rng(0).normal(size=(50, 3))
    assert m.ave(v, v) == 0.0
    assert m.ave(v + np.array([3.0, 4.0, 0.0]), v) == pytest.approx(5.0)


def test_ate_constant_offset_and_zero() -> None:
    _, p = _line()
    assert m.ate(p, p) == 0.0
    assert m.ate(p + np.array([1.0, 2.0, 2.0]), p) == pytest.approx(3.0)
    # half the samples off by 2 m, half exact → √(½·4) = √2
    off = p.copy()
    off[::2] += [0.0, 0.0, 2.0]
    n_off = len(p[::2])
    assert m.ate(off, p) == pytest.approx(math.sqrt(4.0 * n_off / len(p)))


def test_ate_aligned_removes_yaw_and_translation_only() -> None:
    _, p = _line()
    rot = Rotation.from_euler("z", 0.7).as_matrix()
    moved = p @ rot.T + [5.0, -1.0, 2.0]
    assert m.ate(moved, p) > 1.0
    assert m.ate_aligned(moved, p, "yaw") == pytest.approx(0.0, abs=1e-12)
    tilted = p @ Rotation.from_euler("x", 0.4).as_matrix().T
    assert m.ate_aligned(tilted, p, "yaw") > 0.05  # yaw alignment cannot undo a tilt
    assert m.ate_aligned(tilted, p, "se3") == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="mode"):
        m.ate_aligned(p, p, "sim3")  # type: ignore[arg-type]


def test_rte_of_a_constant_drift_rate() -> None:
    """Drift of 0.1 m/s along x: every 5 s displacement is off by exactly 0.5 m."""
    t, p = _line()
    drift = p + np.outer(t, [0.1, 0.0, 0.0])
    assert m.rte(t, drift, p, delta=5.0) == pytest.approx(0.5)
    assert m.rte(t, p + np.array([3.0, 0.0, 0.0]), p) == pytest.approx(0.0, abs=1e-12)  # offset cancels
    # shorter than Δt: whole-span displacement error
    assert m.rte(t[:21], drift[:21], p[:21], delta=5.0) == pytest.approx(0.1)


def test_rte_interpolates_end_points_between_samples() -> None:
    t = np.array([0.0, 1.0, 2.0, 3.3, 4.0, 5.5, 6.0, 7.0])
    p = np.zeros((t.size, 3))
    drift = np.outer(t, [0.0, 0.2, 0.0])
    assert m.rte(t, p + drift, p, delta=5.0) == pytest.approx(1.0)


def test_nll_of_calibrated_gaussian() -> None:
    rng = np.random.default_rng(1)
    sigma = 0.3
    gt = rng.normal(size=(200_000, 3))
    est = gt + rng.normal(scale=sigma, size=gt.shape)
    var = np.full(gt.shape, sigma**2)
    expected = 0.5 * math.log(2 * math.pi * sigma**2) + 0.5
    assert m.gaussian_nll(est, var, gt) == pytest.approx(expected, abs=5e-3)
    # exact value on a single hand case: e = σ → ½ log(2πσ²) + ½
    assert m.gaussian_nll(np.array([[sigma, 0, 0]]), np.full((1, 3), sigma**2), np.zeros((1, 3))) == pytest.approx(
        0.5 * math.log(2 * math.pi * sigma**2) + 0.5 / 3
    )
    # covariance input uses the diagonal
    cov = np.broadcast_to(np.eye(3) * sigma**2, (gt.shape[0], 3, 3))
    assert m.gaussian_nll(est, cov, gt) == pytest.approx(m.gaussian_nll(est, var, gt))
    with pytest.raises(ValueError, match="var_est"):
        m.gaussian_nll(est[:2], np.zeros((2, 3)), gt[:2])


def test_chi2_bounds_and_ideal_median_match_the_design_numbers() -> None:
    lo, hi = m.NEES_BOUNDS
    assert lo == pytest.approx(0.216, abs=5e-4) and hi == pytest.approx(9.348, abs=5e-4)
    assert m.NEES_IDEAL_MEDIAN == pytest.approx(2.366, abs=5e-4)


def test_nees_of_calibrated_samples() -> None:
    rng = np.random.default_rng(2)
    n = 40_000
    a = rng.normal(size=(n, 3, 3))
    cov = a @ a.transpose(0, 2, 1) + 0.1 * np.eye(3)
    err = np.einsum("nij,nj->ni", np.linalg.cholesky(cov), rng.normal(size=(n, 3)))
    values = m.nees(err, cov)
    s = m.nees_summary(values)
    assert s.median == pytest.approx(2.366, abs=0.05)
    assert s.in_bounds == pytest.approx(0.95, abs=0.005)
    assert s.mean == pytest.approx(3.0, abs=0.05)
    # hand case: e = (1, 2, 0), Σ = diag(1, 4, 9) → 1 + 1 = 2
    assert m.nees(np.array([[1.0, 2.0, 0.0]]), np.diag([1.0, 4.0, 9.0])[None])[0] == pytest.approx(2.0)
    # overconfident covariance (4x too small) → NEES 4x larger
    assert m.nees_summary(m.nees(err, cov / 4)).median == pytest.approx(4 * s.median, rel=1e-9)


def test_interpolate_ground_truth_linear_and_slerp() -> None:
    t = np.array([0.0, 1.0, 2.0])
    p = np.array([[0.0, 0, 0], [1.0, 2, 0], [2.0, 2, 2]])
    v = p * 2
    q = Rotation.from_euler("z", np.array([0.0, 0.5, 1.0])[:, None]).as_quat()
    g = m.interpolate_ground_truth(t, p, q, v, np.array([0.5, 1.75]))
    np.testing.assert_allclose(g.p, [[0.5, 1.0, 0.0], [1.75, 2.0, 1.5]])
    np.testing.assert_allclose(g.v, 2 * g.p)
    np.testing.assert_allclose(Rotation.from_quat(g.q).as_euler("zyx")[:, 0], [0.25, 0.875], atol=1e-12)
    np.testing.assert_allclose(g.body_velocity, Rotation.from_quat(g.q).inv().apply(g.v))
    with pytest.raises(ValueError, match="outside ground truth"):
        m.interpolate_ground_truth(t, p, q, v, np.array([2.5]))


def test_flight_metrics_on_a_perfect_and_an_offset_filter() -> None:
    t = np.arange(0.0, 20.0, 0.05)
    p = np.stack([np.sin(0.5 * t), np.cos(0.5 * t), 0.1 * t], axis=1)
    v = np.stack([0.5 * np.cos(0.5 * t), -0.5 * np.sin(0.5 * t), np.full_like(t, 0.1)], axis=1)
    q = Rotation.from_euler("z", 0.2 * t[:, None]).as_quat()
    gt = m.interpolate_ground_truth(t, p, q, v, t)
    rng = np.random.default_rng(3)
    sigma = 0.1
    v_net = gt.body_velocity + rng.normal(scale=sigma, size=v.shape)
    cov = np.broadcast_to(np.eye(3) * sigma**2, (t.size, 3, 3))
    v_fused = v + np.einsum("nij,nj->ni", np.linalg.cholesky(cov), rng.normal(size=v.shape))
    fm = m.flight_metrics(gt, v_net, np.full(v.shape, sigma**2), p + np.array([0.0, 0.0, 1.0]), v_fused, cov)
    assert fm.ate == pytest.approx(1.0)
    assert fm.rte == pytest.approx(0.0, abs=1e-12)
    assert fm.net_ave == pytest.approx(sigma * math.sqrt(8 / math.pi), rel=0.1)  # mean of a χ₃ · σ
    assert fm.net_nll == pytest.approx(0.5 * math.log(2 * math.pi * sigma**2) + 0.5, abs=0.1)
    assert fm.nees_median == pytest.approx(2.366, rel=0.2)
    assert tuple(fm.as_dict()) == m.PAPER_KEYS + m.EXTRA_KEYS  # the paper's seven first, in their order
    assert fm.nees_mean == pytest.approx(3.0, rel=0.2)
    # fused NLL of a filter whose covariance fits its errors: the Gaussian's entropy, ½(3 + log det Σ + 3 log 2π)
    assert fm.fused_nll == pytest.approx(0.5 * (3 + 3 * math.log(2 * math.pi * sigma**2)), abs=0.1)
    assert math.isnan(fm.rot_rms) and math.isnan(fm.ave_body)  # no orientation given: no orientation columns
    # a displacement method has no network velocity: net columns NaN, the fused ones unchanged
    nan = np.full(v.shape, np.nan)
    fd = m.flight_metrics(gt, nan, nan, p + np.array([0.0, 0.0, 1.0]), v_fused, cov)
    assert math.isnan(fd.net_ave) and math.isnan(fd.net_nll)
    assert (fd.ave, fd.rte, fd.ate, fd.nees_median) == (fm.ave, fm.rte, fm.ate, fm.nees_median)


def test_fused_nll_judges_the_estimate_and_its_covariance_together() -> None:
    """The NLL is lowest with the covariance that fits the errors, where the AVE cannot tell the covariances apart,
    and lower for the more accurate of two filters that both fit, where the NEES cannot tell them apart."""
    t = np.arange(0.0, 50.0, 0.05)
    v = np.stack([np.cos(0.1 * t), np.sin(0.1 * t), 0.0 * t], axis=1)
    p = np.cumsum(v, 0) * 0.05
    q = np.tile([0.0, 0.0, 0.0, 1.0], (t.size, 1))
    gt = m.interpolate_ground_truth(t, p, q, v, t)
    sigma = 0.2
    noise = np.random.default_rng(6).normal(size=v.shape)
    cov = np.broadcast_to(np.eye(3) * sigma**2, (t.size, 3, 3))
    net = np.full(v.shape, np.nan)
    fits, small, large = (m.flight_metrics(gt, net, net, p, v + sigma * noise, k * cov) for k in (1.0, 0.25, 4.0))
    assert fits.ave == small.ave == large.ave
    assert fits.fused_nll < small.fused_nll and fits.fused_nll < large.fused_nll
    worse = m.flight_metrics(gt, net, net, p, v + 2 * sigma * noise, 4 * cov)  # twice the error, covariance fits
    assert worse.nees_in_bounds == fits.nees_in_bounds and worse.nees_median == pytest.approx(fits.nees_median)
    assert worse.fused_nll == pytest.approx(fits.fused_nll + 3 * math.log(2))  # ½ log det grows by 3 log 2
    # without a covariance there is no NLL
    assert math.isnan(m.flight_metrics(gt, net, net, p, v + sigma * noise, np.full_like(cov, np.nan)).fused_nll)


def test_rotation_and_final_yaw_error_of_a_known_offset() -> None:
    yaw = np.linspace(-3.0, 3.0, 50)
    q_gt = Rotation.from_euler("zyx", np.stack([yaw, 0.2 * np.sin(yaw), 0.1 * yaw], axis=1)).as_quat()
    off = Rotation.from_rotvec(np.radians(10.0) * np.array([1.0, 2.0, 2.0]) / 3.0)
    q_est = (Rotation.from_quat(q_gt) * off).as_quat()  # 10° about a body axis, every sample
    np.testing.assert_allclose(m.rotation_errors(q_est, q_gt), np.radians(10.0), atol=1e-12)
    assert m.rotation_rms_deg(q_est, q_gt) == pytest.approx(10.0)
    # heading: the difference of the ZYX yaws, wrapped: 179° estimated against -179° true is 2°, not 358°
    q_a = Rotation.from_euler("z", [[np.radians(179.0)]]).as_quat()
    q_b = Rotation.from_euler("z", [[np.radians(-179.0)]]).as_quat()
    assert m.yaw_errors(q_a, q_b)[0] == pytest.approx(np.radians(-2.0))
    assert m.final_yaw_error_deg(np.vstack([q_b, q_a]), np.vstack([q_b, q_b])) == pytest.approx(2.0)
    assert m.rotation_rms_deg(q_gt, q_gt) == pytest.approx(0.0, abs=1e-6)


def test_body_ave_is_blind_to_a_heading_error_that_the_world_ave_sees() -> None:
    """An estimator whose heading is off by 30° but whose body velocity is right: world AVE large, body AVE zero."""
    t = np.arange(0.0, 10.0, 0.05)
    q = Rotation.from_euler("zyx", np.stack([0.3 * t, 0.1 * np.sin(t), 0 * t], axis=1))
    v_body = np.stack([1.0 + 0 * t, 0.2 * np.cos(t), 0.1 * np.sin(t)], axis=1)
    q_est = Rotation.from_euler("z", np.radians(30.0)) * q
    v_world, v_est = q.apply(v_body), q_est.apply(v_body)
    assert m.ave(v_est, v_world) > 0.4
    assert m.body_ave(v_est, q_est.as_quat(), v_world, q.as_quat()) == pytest.approx(0.0, abs=1e-12)
    gt = m.interpolate_ground_truth(t, np.cumsum(v_world, 0) * 0.05, q.as_quat(), v_world, t)
    cov = np.broadcast_to(np.eye(3), (t.size, 3, 3))
    fm = m.flight_metrics(gt, v_body, np.ones((t.size, 3)), gt.p, v_est, cov, q_fused=q_est.as_quat())
    assert fm.yaw_final == pytest.approx(30.0) and fm.rot_rms == pytest.approx(30.0)
    assert fm.ave_body == pytest.approx(0.0, abs=1e-12) and fm.ave > 0.4
    assert fm.ate == 0.0 and fm.ate_yaw == pytest.approx(0.0, abs=1e-9) and fm.ate_se3 == pytest.approx(0.0, abs=1e-9)
    # a trajectory rotated about z by 0.5 rad and shifted: unaligned ATE large, yaw-aligned ATE zero
    rot = Rotation.from_euler("z", 0.5)
    fr = m.flight_metrics(gt, v_body, np.ones((t.size, 3)), rot.apply(gt.p) + np.array([1.0, 2.0, 0.0]), v_est, cov)
    assert fr.ate > 1.0 and fr.ate_yaw == pytest.approx(0.0, abs=1e-9) and fr.ate_se3 == pytest.approx(0.0, abs=1e-9)
    # no covariance: the NEES columns are NaN, the others stay
    fn = m.flight_metrics(gt, v_body, np.ones((t.size, 3)), gt.p, v_est, np.full_like(cov, np.nan))
    assert math.isnan(fn.nees_median) and math.isnan(fn.nees_mean) and fn.ave == fm.ave


def test_shape_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="p_est"):
        m.ate(np.zeros((4, 2)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="same length"):
        m.ave(np.zeros((4, 3)), np.zeros((5, 3)))
