"""Statistics the nodes' health needs without scipy: the χ² distribution's CDF and quantiles.

Used for the NIS consistency test (:class:`velobins_common.health.NisMonitor`): the quantiles of
χ²(k) for k up to a few hundred degrees of freedom, by the series of the regularised lower
incomplete gamma function and bisection.
"""

from __future__ import annotations

import math


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
