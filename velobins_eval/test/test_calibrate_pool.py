"""The filter passes of ``velobins calibrate`` give the same terms in worker processes as in-process."""

from __future__ import annotations

import numpy as np
import pytest

from velobins_data.sim.flight import simulate_flight
from velobins_ekf.config import EkfConfig
from velobins_eval.calibrate_fit import Objective, Point, synthetic_measurements
from velobins_eval.calibrate_pool import FlightPool


def test_workers_give_the_in_process_objective_and_blocks():
    rng = np.random.default_rng(0)
    flights = [
        synthetic_measurements(simulate_flight("nano", fam, 8.0, seed, index=i), 0.1, rng)
        for i, (fam, seed) in enumerate((("figure8", 1), ("circle", 2), ("helix", 3)))
    ]
    point = Point(EkfConfig(), 1.0)
    local = Objective(flights, "posterior", workers=1)
    pooled = Objective(flights, "posterior", workers=2)
    try:
        assert pooled.pool.executor is not None
        assert pooled(point) == local(point)
        np.testing.assert_array_equal(pooled.blocks(point, 2.0), local.blocks(point, 2.0))
        # the by-flight sandwich groups blocks by these counts: one run of blocks per flight, every term kept
        counts = local.block_counts(2.0)
        assert len(counts) == 3 and sum(counts) == len(local.blocks(point, 2.0))
        per_flight = np.split(local.blocks(point, 2.0), np.cumsum(counts)[:-1])
        terms = local.terms(point)
        np.testing.assert_allclose([b.sum() for b in per_flight], [t.sum() for _, t in terms], rtol=1e-12)
    finally:
        pooled.close()
        local.close()
    assert pooled.pool.executor is None


def test_pool_rejects_zero_workers():
    with pytest.raises(ValueError, match="--workers"):
        FlightPool([], len, 0)
