"""velobins_common.stats: χ² bounds against scipy and tables, the Gaussian NLL and NEES on hand cases, the correlation
time on Gauss-Markov series."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2, multivariate_normal, norm

from velobins_common.stats import (
    HALF_LOG_2PI,
    NEES_BOUNDS,
    NEES_IDEAL_MEDIAN,
    autocorrelation,
    chi2_bounds,
    chi2_cdf,
    chi2_quantile,
    correlation_time,
    gaussian_crps_samples,
    gaussian_nll,
    gaussian_nll_full,
    gaussian_nll_samples,
    nees,
)


def test_chi2_quantiles_match_scipy_and_tables() -> None:
    for dof in (1, 2, 3, 6, 300):
        for p in (0.001, 0.025, 0.5, 0.975, 0.999):
            assert chi2_quantile(p, dof) == pytest.approx(chi2.ppf(p, dof), rel=1e-11)
    assert chi2_quantile(0.95, 1) == pytest.approx(1.959964**2, rel=1e-6)  # the 1-dof 95 % point is 1.96²
    assert chi2_cdf(3.0, 3) == pytest.approx(math.erf(math.sqrt(1.5)) - math.sqrt(6 / math.pi) * math.exp(-1.5))
    assert chi2_cdf(-1.0, 3) == 0.0
    with pytest.raises(ValueError, match="p must be in"):
        chi2_quantile(1.0, 3)


def test_nees_bounds_and_median_are_the_design_numbers() -> None:
    lo, hi = NEES_BOUNDS
    assert round(lo, 3) == 0.216 and round(hi, 3) == 9.348
    assert round(NEES_IDEAL_MEDIAN, 3) == 2.366
    assert chi2_bounds(3, 0.95) == NEES_BOUNDS
    lo99, hi99 = chi2_bounds(3, 0.99)
    assert lo99 < lo and hi99 > hi  # a wider confidence widens both ends
    with pytest.raises(ValueError, match="confidence"):
        chi2_bounds(3, 1.5)


def test_gaussian_nll_is_the_per_axis_log_density() -> None:
    rng = np.random.default_rng(3)
    est, gt = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    var = rng.uniform(0.1, 2.0, size=(50, 3))
    expected = -np.mean(norm.logpdf(gt, loc=est, scale=np.sqrt(var)))
    assert gaussian_nll(est, var, gt) == pytest.approx(expected, rel=1e-12)
    cov = np.zeros((50, 3, 3))
    cov[:, range(3), range(3)] = var
    cov[:, 0, 1] = cov[:, 1, 0] = 0.01  # off-diagonal terms are ignored: the axes are scored independently
    assert gaussian_nll(est, cov, gt) == pytest.approx(expected, rel=1e-12)
    assert HALF_LOG_2PI == pytest.approx(-norm.logpdf(0.0))
    with pytest.raises(ValueError, match="var_est"):
        gaussian_nll(est, np.zeros_like(var), gt)
    with pytest.raises(ValueError, match="must match"):
        gaussian_nll(est, var[:, :2], gt)


def test_gaussian_nll_full_is_the_multivariate_log_density() -> None:
    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + 0.5 * np.eye(3)
    e = rng.normal(size=3)
    _, logdet = np.linalg.slogdet(cov)
    value = gaussian_nll_full(float(e @ np.linalg.solve(cov, e)), logdet, 3)
    assert value == pytest.approx(-multivariate_normal(np.zeros(3), cov).logpdf(e), rel=1e-12)


def test_gaussian_nll_samples_is_each_samples_log_density_and_inf_without_one() -> None:
    rng = np.random.default_rng(5)
    a = rng.normal(size=(4, 3, 3))
    cov = a @ a.transpose(0, 2, 1) + 0.2 * np.eye(3)
    err = rng.normal(size=(4, 3))
    expected = [-multivariate_normal(np.zeros(3), c).logpdf(e) for e, c in zip(err, cov, strict=True)]
    np.testing.assert_allclose(gaussian_nll_samples(err, cov), expected, rtol=1e-12)
    # a covariance that is not positive definite has no density: inf, so a minimised score never picks it
    cov[2] = -np.eye(3)
    out = gaussian_nll_samples(err, cov)
    assert math.isinf(out[2]) and np.all(np.isfinite(np.delete(out, 2)))


def test_gaussian_crps_is_the_integral_of_the_squared_cdf_gap_and_proper() -> None:
    """Against the definition ∫ (F(x) − 1{x ≥ e})² dx (numerical), |e| in the σ → 0 limit, and proper: over errors
    drawn from N(0, 1) the mean score is smallest at σ = 1."""
    from scipy.integrate import quad

    err = np.array([[0.3, -1.2], [2.5, 0.0]])
    cov = np.array([np.diag([0.5, 2.0]), np.diag([1.5, 0.1])]) + np.array([[[0, 0.1], [0.1, 0]]] * 2)  # off-diagonal
    out = gaussian_crps_samples(err, cov)
    for n in range(2):
        total = 0.0
        for i in range(2):
            sd = math.sqrt(cov[n, i, i])
            below, _ = quad(lambda x, sd=sd: norm.cdf(x, scale=sd) ** 2, -60.0, err[n, i])
            above, _ = quad(lambda x, sd=sd: (1.0 - norm.cdf(x, scale=sd)) ** 2, err[n, i], 60.0)
            total += below + above
        assert out[n] == pytest.approx(total, rel=1e-7)
    sharp = gaussian_crps_samples(np.array([[0.7, -0.2]]), np.eye(2)[None] * 1e-12)
    assert sharp[0] == pytest.approx(0.9, abs=1e-5)
    draws = np.random.default_rng(2).normal(size=(20000, 1))
    mean = {sd: gaussian_crps_samples(draws, np.full((20000, 1, 1), sd**2)).mean() for sd in (0.7, 1.0, 1.4)}
    assert mean[1.0] < mean[0.7] and mean[1.0] < mean[1.4], mean
    assert math.isinf(gaussian_crps_samples(err, -cov)[0])


def test_nees_hand_case_and_calibrated_samples() -> None:
    assert nees(np.array([[1.0, 2.0, 0.0]]), np.diag([1.0, 4.0, 9.0])[None])[0] == pytest.approx(2.0)
    rng = np.random.default_rng(2)
    n = 20_000
    a = rng.normal(size=(n, 3, 3))
    cov = a @ a.transpose(0, 2, 1) + 0.1 * np.eye(3)
    err = np.einsum("nij,nj->ni", np.linalg.cholesky(cov), rng.normal(size=(n, 3)))
    values = nees(err, cov)
    lo, hi = NEES_BOUNDS
    assert np.mean((values >= lo) & (values <= hi)) == pytest.approx(0.95, abs=0.01)
    assert np.median(values) == pytest.approx(NEES_IDEAL_MEDIAN, abs=0.08)
    with pytest.raises(ValueError, match="need err"):
        nees(err, cov[:, :2, :2])


def test_correlation_time_recovers_gauss_markov_time_constants_and_white_noise() -> None:
    rng = np.random.default_rng(7)
    dt, taus = 0.05, np.array([0.2, 1.0, 3.0])
    phi = np.exp(-dt / taus)
    flights = []
    for _ in range(40):
        x = np.empty((1200, 3))
        x[0] = rng.standard_normal(3)
        for t in range(1, x.shape[0]):
            x[t] = phi * x[t - 1] + np.sqrt(1 - phi**2) * rng.standard_normal(3)
        flights.append(x)
    assert correlation_time(flights, dt) == pytest.approx(taus, rel=0.15)
    white = correlation_time([rng.standard_normal((1200, 2)) for _ in range(5)], dt)
    assert np.all(white < dt)


def test_correlation_time_counts_a_bias_and_matches_the_direct_sums() -> None:
    rng = np.random.default_rng(3)
    biased = [rng.standard_normal((400, 1)) + 2.0 for _ in range(3)]  # the bias never decorrelates
    assert correlation_time(biased, 0.1)[0] == math.inf
    series = [rng.standard_normal((n, 1)).cumsum(axis=0) * 0.1 + rng.standard_normal((n, 1)) for n in (30, 50)]
    got = correlation_time(series, 1.0)[0]
    rho = []
    for k in range(50):
        pairs = [x[: len(x) - k, 0] * x[k:, 0] for x in series if len(x) > k]
        rho.append(np.concatenate(pairs).mean())
    rho = np.array(rho) / rho[0]
    assert autocorrelation(series)[:, 0] == pytest.approx(rho, rel=1e-9, abs=1e-12)  # the sums correlation_time reads
    k = int(np.flatnonzero(rho < 1 / math.e)[0])
    assert got == pytest.approx(k - 1 + (rho[k - 1] - 1 / math.e) / (rho[k - 1] - rho[k]), rel=1e-9)
    with pytest.raises(ValueError, match="dt must be > 0"):
        correlation_time(series, 0.0)
    with pytest.raises(ValueError, match="same width"):
        correlation_time([np.zeros((3, 1)), np.zeros((3, 2))], 1.0)


def test_exponential_average_follows_a_step_with_its_time_constant():
    from velobins_common.stats import exponential_average, exponential_average_step

    t = np.arange(0.0, 5.0, 0.01)
    x = np.where(t < 1.0, 0.0, 1.0)[:, None]
    y = exponential_average(t, x, 0.5)[:, 0]
    assert y[np.searchsorted(t, 1.0) - 1] == 0.0  # causal: nothing before the step
    assert y[np.searchsorted(t, 1.5)] == pytest.approx(1 - math.exp(-1), abs=0.02)  # one τ after it
    np.testing.assert_array_equal(exponential_average(t, x, 0.0), x)  # τ = 0: as is
    assert exponential_average_step(np.array([0.0]), np.array([1.0]), 100.0, 0.5)[0] == pytest.approx(1.0)  # a gap
    with pytest.raises(ValueError, match="tau and dt must be >= 0"):
        exponential_average_step(None, np.zeros(1), -1.0, 1.0)
    with pytest.raises(ValueError, match="need t"):
        exponential_average(t, x[:-1], 1.0)
