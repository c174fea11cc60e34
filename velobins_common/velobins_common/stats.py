"""Statistics of the paper's consistency and uncertainty figures: one definition each for every package.

* **χ² distribution** (:func:`chi2_cdf`, :func:`chi2_quantile`, :func:`chi2_bounds`): the reference
  of NEES and NIS. A consistent filter's 3-dof velocity NEES falls inside the two-sided 95 % bounds
  [0.216, 9.348] about 95 % of the time and has median 2.366 (docs/design.md "Metrics"). The
  evaluation (``velobins_eval.metrics``), the checkpoint selection (``velobins_net.schedule``) and the
  nodes' NIS monitor (``velobins_common.health``) read these bounds from here. Computed with math
  only (a series for the regularised incomplete gamma and a bisection; relative error below 1e-12
  against scipy), so the vehicle nodes need no scipy.stats.
* **Gaussian NLL** (:func:`gaussian_nll`, per axis, the paper's NLL metric §IV-A;
  :func:`gaussian_nll_full`, with a full covariance; :func:`gaussian_nll_samples`, per sample of a series: the
  fused velocity's log score that ``velobins calibrate`` minimises and ``velobins evaluate`` reports) and its
  normaliser :data:`HALF_LOG_2PI`, which the torch training losses (``velobins_net.losses``,
  ``velobins_net.baselines.losses``) also take from here.
* **NEES** (:func:`nees`): ``eᵀ Σ⁻¹ e`` per sample.
* **Gaussian CRPS** (:func:`gaussian_crps_samples`): the continuous ranked probability score of each sample's
  marginals, in the error's unit; ``velobins calibrate --objective crps`` minimises it.
* **Exponential average over time** (:func:`exponential_average_step`, :func:`exponential_average`): a causal
  average of an irregularly sampled series with a time constant; the network predictor smooths an ensemble's
  disagreement with it in flight (what ``velobins calibrate`` and ``velobins evaluate`` read from the predictor), and
  the recipe study's probe replays the same average over saved estimates.
* **Correlation time** (:func:`correlation_time`, from the pooled :func:`autocorrelation`): how long a series of
  errors stays correlated with itself; ``velobins calibrate`` reports it for the network's errors, which the filter
  takes as white.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
"""½ log(2π) ≈ 0.919: the normaliser of one axis of a Gaussian log-density."""


# ----------------------------------------------------------------------------- χ² distribution
def chi2_cdf(x: float, dof: int) -> float:
    """P(X ≤ x) for X ~ χ²(dof): the regularised lower incomplete gamma P(dof/2, x/2), by its series."""
    if x <= 0:
        return 0.0
    a, h = 0.5 * dof, 0.5 * x
    term = total = 1.0 / a
    n = 0
    while term > 1e-16 * total and n < 10_000:
        n += 1
        term *= h / (a + n)
        total += term
    return min(1.0, math.exp(a * math.log(h) - h - math.lgamma(a)) * total)


def chi2_quantile(p: float, dof: int) -> float:
    """x with P(X ≤ x) = p for X ~ χ²(dof) (bisection on :func:`chi2_cdf`; 0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"chi2_quantile: p must be in (0, 1), got {p!r}")
    lo, hi = 0.0, max(1.0, dof)
    while chi2_cdf(hi, dof) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if chi2_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


def chi2_bounds(dof: int, confidence: float) -> tuple[float, float]:
    """Two-sided ``confidence`` interval of a χ²(dof) variable: (3, 0.95) → (0.216, 9.348)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"chi2_bounds: confidence must be in (0, 1), got {confidence!r}")
    tail = 0.5 * (1.0 - confidence)
    return chi2_quantile(tail, dof), chi2_quantile(1.0 - tail, dof)


NEES_DOF = 3
"""Degrees of freedom of the velocity NEES (and of the velocity update's NIS)."""
NEES_CONFIDENCE = 0.95
"""Two-sided confidence of the consistency bounds: a consistent filter has this share inside them."""
NEES_BOUNDS = chi2_bounds(NEES_DOF, NEES_CONFIDENCE)
"""(lower, upper) 95 % bounds of a consistent 3-dof NEES: (0.216, 9.348)."""
NEES_IDEAL_MEDIAN = chi2_quantile(0.5, NEES_DOF)
"""Median of χ²₃, 2.366: the median NEES of a perfectly calibrated filter."""


# ----------------------------------------------------------------------------- Gaussian NLL, NEES
def _rows(name: str, a: np.ndarray) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"'{name}' must have shape (N, d) with N > 0, got {arr.shape}")
    return arr


def gaussian_nll(v_est: np.ndarray, var_est: np.ndarray, v_gt: np.ndarray) -> float:
    """Mean per-axis Gaussian NLL [nats]: ``mean_{n,i} ½ log(2π σ²_{n,i}) + ½ e²_{n,i} / σ²_{n,i}``, e = v_est − v_gt.

    ``v_est`` and ``v_gt`` are (N, d); ``var_est`` is (N, d) variances or (N, d, d) covariances
    (their diagonal is used: the paper's NLL treats the axes independently).

    Raises:
        ValueError: naming the argument, on a shape mismatch or a variance that is not finite and > 0.
    """
    est, gt = _rows("v_est", v_est), _rows("v_gt", v_gt)
    var = np.asarray(var_est, dtype=np.float64)
    if var.ndim == 3:
        var = np.diagonal(var, axis1=1, axis2=2)
    if est.shape != gt.shape or var.shape != est.shape:
        raise ValueError(f"gaussian_nll: 'v_est' {est.shape}, 'var_est' {var.shape} and 'v_gt' {gt.shape} must match")
    if np.any(var <= 0) or not np.all(np.isfinite(var)):
        raise ValueError("gaussian_nll: 'var_est' must be finite and > 0")
    e2 = (est - gt) ** 2
    return float(np.mean(HALF_LOG_2PI + 0.5 * np.log(var) + 0.5 * e2 / var))


def gaussian_nll_full(mahalanobis_sq: float, log_det: float, dim: int) -> float:
    """NLL [nats] of one d-dimensional Gaussian sample: ``½ (eᵀ Σ⁻¹ e + log det Σ) + d · ½ log 2π``."""
    return 0.5 * (mahalanobis_sq + log_det) + dim * HALF_LOG_2PI


def gaussian_nll_samples(err: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """(N,) :func:`gaussian_nll_full` of each of (N, d) errors under its (N, d, d) covariance, from its :func:`nees`.

    inf where a covariance is not positive definite: its density is undefined, and a score that must be
    minimised (``velobins calibrate``) then never picks it.
    """
    sign, log_det = np.linalg.slogdet(np.asarray(cov, dtype=np.float64))
    out = gaussian_nll_full(nees(err, cov), log_det, np.shape(err)[1])
    return np.where(sign > 0, out, math.inf)


def gaussian_crps_samples(err: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """(N,) sum over the d axes of the CRPS of N(0, Σ_ii) at the error e_i, for (N, d) errors and (N, d, d) covariances.

    CRPS(N(0, σ²), e) = σ (z (2Φ(z) − 1) + 2φ(z) − 1/√π), z = e/σ (Gneiting & Raftery 2007, eq. 21): the mean
    absolute error of a draw from the forecast minus half the mean distance between two draws. Strictly proper
    like the log score, but linear rather than quadratic in e/σ, so a few large errors weigh less and a covariance
    wider than the errors costs in proportion to its width; for σ → 0 it is |e|. Marginal per axis (the
    multivariate CRPS has no closed form); inf where a variance is not positive.
    """
    e = np.asarray(err, dtype=np.float64)
    c = np.asarray(cov, dtype=np.float64)
    if e.ndim != 2 or c.shape != (e.shape[0], e.shape[1], e.shape[1]):
        raise ValueError(f"gaussian_crps_samples: need err (N, d) and cov (N, d, d), got {e.shape} and {c.shape}")
    var = np.diagonal(c, axis1=1, axis2=2)
    ok = np.all(var > 0, axis=1)
    sigma = np.sqrt(np.where(var > 0, var, 1.0))
    z = e / sigma
    cdf = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[float])(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    terms = sigma * (z * (2.0 * cdf - 1.0) + 2.0 * pdf - 1.0 / math.sqrt(math.pi))
    return np.where(ok, terms.sum(axis=1), math.inf)


def nees(err: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Per-sample NEES ``eᵀ Σ⁻¹ e`` of (N, d) errors with (N, d, d) covariances."""
    e = np.asarray(err, dtype=np.float64)
    c = np.asarray(cov, dtype=np.float64)
    if e.ndim != 2 or c.shape != (e.shape[0], e.shape[1], e.shape[1]):
        raise ValueError(f"nees: need err (N, d) and cov (N, d, d), got {e.shape} and {c.shape}")
    return np.einsum("ni,ni->n", e, np.linalg.solve(c, e[..., None])[..., 0])


def correlation_time(series: Sequence[np.ndarray], dt: float) -> np.ndarray:
    """Per column, the lag [s] at which the pooled autocorrelation of ``series`` first falls below 1/e.

    ``series`` are (T_i, d) arrays sampled every ``dt`` seconds (one per flight, so no lag spans two
    flights). The autocorrelation at lag k is ``Σ x_t x_{t+k} / Σ x_t²`` over every pair k apart, each
    sum divided by its count, with the series *not* demeaned: a bias is an error that lasts, and it
    counts. For a first-order Gauss-Markov series (``x_{t+1} = e^{−dt/τ} x_t + w``) this is τ; for white
    noise it is below ``dt`` (linear interpolation between lags). inf where the autocorrelation stays
    above 1/e up to the longest series' length.

    Raises:
        ValueError: on no series, series of different widths, or ``dt`` not > 0.
    """
    if not dt > 0:
        raise ValueError(f"correlation_time: dt must be > 0, got {dt}")
    rho = autocorrelation(series)
    out = np.full(rho.shape[1], math.inf)
    for j in range(rho.shape[1]):
        below = np.flatnonzero(rho[:, j] < 1.0 / math.e)
        if below.size:
            k = int(below[0])  # k ≥ 1: rho[0] is 1
            frac = (rho[k - 1, j] - 1.0 / math.e) / (rho[k - 1, j] - rho[k, j])
            out[j] = (k - 1 + frac) * dt
    return out


def autocorrelation(series: Sequence[np.ndarray]) -> np.ndarray:
    """(L, d): per column, the pooled autocorrelation of ``series`` at lags 0 … L − 1, L the longest series' length.

    ``series`` are (T_i, d) arrays (one per flight, so no lag spans two flights). At lag k it is ``Σ x_t x_{t+k} /
    Σ x_t²`` over every pair k apart, each sum divided by its count; the series are *not* demeaned (demean them
    first for the autocorrelation about each one's mean). 1 at lag 0.

    Raises:
        ValueError: on no series, or series of different widths.
    """
    arrays = [np.asarray(x, dtype=np.float64) for x in series]
    if not arrays or any(a.ndim != 2 or a.shape[1] != arrays[0].shape[1] for a in arrays):
        raise ValueError("autocorrelation: need one or more (T, d) arrays of the same width d")
    longest = max(a.shape[0] for a in arrays)
    sums = np.zeros((longest, arrays[0].shape[1]))
    counts = np.zeros(longest)
    for a in arrays:
        n = a.shape[0]
        if n == 0:
            continue
        size = 1 << (2 * n - 1).bit_length()  # zero-padded FFT: the linear, not circular, correlation
        spectrum = np.fft.rfft(a, size, axis=0)
        sums[:n] += np.fft.irfft(spectrum * spectrum.conj(), size, axis=0)[:n]
        counts[:n] += np.arange(n, 0, -1)
    return (sums / np.maximum(counts, 1)[:, None]) / (sums[0] / counts[0])


# ----------------------------------------------------------------------------- exponential average over time
def exponential_average_step(previous: np.ndarray | None, x: np.ndarray, dt: float, tau: float) -> np.ndarray:
    """One step of a causal exponential average with time constant ``tau`` [s]: ``x`` itself when there is no
    ``previous`` value or ``tau`` is 0, else ``previous + (1 − e^{−dt/τ})(x − previous)``. ``dt`` is the time
    since the previous sample [s]; a long gap (dt ≫ τ) forgets the past, as it should after a dropout.

    Raises:
        ValueError: on ``tau`` < 0 or ``dt`` < 0.
    """
    if tau < 0 or dt < 0:
        raise ValueError(f"exponential_average_step: tau and dt must be >= 0, got tau={tau}, dt={dt}")
    x = np.asarray(x, dtype=np.float64)
    if previous is None or tau == 0:
        return x.copy()
    return previous + (1.0 - math.exp(-dt / tau)) * (x - previous)


def exponential_average(t: np.ndarray, x: np.ndarray, tau: float) -> np.ndarray:
    """(N, d): :func:`exponential_average_step` run over the samples ``x`` (N, d) at stamps ``t`` (N,), in order."""
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != t.shape[0]:
        raise ValueError(f"exponential_average: need t (N,) and x (N, d), got {t.shape} and {x.shape}")
    out = np.empty_like(x)
    value = None
    for i in range(len(t)):
        value = exponential_average_step(value, x[i], 0.0 if i == 0 else float(t[i] - t[i - 1]), tau)
        out[i] = value
    return out
