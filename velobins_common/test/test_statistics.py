"""velobins_common.statistics: χ² CDF and quantiles against tables."""

from __future__ import annotations

import math

import pytest

from velobins_common.statistics import chi2_cdf, chi2_quantile


def test_chi2_quantiles_match_tables() -> None:
    # χ²₃: 2.5 %, 97.5 %, 99.9 % (the gate default); χ²₁ 95 % = 1.96²
    assert chi2_quantile(0.025, 3) == pytest.approx(0.2158, abs=1e-4)
    assert chi2_quantile(0.975, 3) == pytest.approx(9.3484, abs=1e-4)
    assert chi2_quantile(0.999, 3) == pytest.approx(16.266, abs=1e-3)
    assert chi2_quantile(0.95, 1) == pytest.approx(1.95996**2, rel=1e-5)
    assert chi2_cdf(3.0, 3) == pytest.approx(math.erf(math.sqrt(1.5)) - math.sqrt(6 / math.pi) * math.exp(-1.5))
    assert chi2_quantile(0.5, 300) == pytest.approx(299.33, abs=0.01)
