"""The curvature and sandwich uncertainty of a calibration fit, on objectives whose answer is known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from velobins_eval.calibrate_uncertainty import FLAT_FACTOR, curvature


def quadratic_blocks(a: np.ndarray, centre: np.ndarray, weights: np.ndarray):
    """Blocks b of ½ w_b (x − c)ᵀ A (x − c) + linear tilts that cancel over the blocks."""
    tilt = np.array([[1.0, -0.5], [-1.0, 0.5]])  # per-block gradients at the centre; their sum is zero

    def blocks(x: np.ndarray) -> np.ndarray:
        d = x - centre
        return np.array([0.5 * w * d @ a @ d for w in weights]) + tilt @ d

    return blocks, tilt


def test_curvature_of_a_quadratic_is_exact_and_the_sandwich_is_h_inv_j_h_inv():
    a = np.array([[40.0, 10.0], [10.0, 20.0]])
    centre = np.array([-2.0, -3.0])
    blocks, tilt = quadratic_blocks(a, centre, np.array([0.5, 0.5]))
    cur = curvature(blocks, centre, ("acc_noise_density", "gyro_noise_density"), [(-6.0, 1.0), (-7.0, 0.0)])
    np.testing.assert_allclose(cur.hessian, a, rtol=1e-6)
    inv = np.linalg.inv(a)
    np.testing.assert_allclose(cur.std, np.sqrt(np.diag(inv)), rtol=1e-6)
    np.testing.assert_allclose(cur.robust_std, np.sqrt(np.diag(inv @ tilt.T @ tilt @ inv)), rtol=1e-6)
    assert cur.blocks == 2 and cur.evaluations == 1 + 2 * 2 + 2 * 2 * 1


def test_a_flat_direction_is_reported():
    a = np.array([[40.0, 0.0], [0.0, 0.5]])  # std of the second: 1/√0.5 = 1.4 decades
    blocks, _ = quadratic_blocks(a, np.zeros(2), np.array([1.0, 0.0]))
    cur = curvature(blocks, np.zeros(2), ("acc_noise_density", "variance_scale"), [(-6.0, 6.0)] * 2)
    lines = cur.lines({"acc_noise_density": 1.0, "variance_scale": 1.0})
    assert "flat" not in lines[1] and "flat" in lines[2]
    assert cur.std[1] > math.log10(FLAT_FACTOR)
    # not a likelihood: no curvature factor, flatness judged on the sandwich alone
    plain = cur.lines({"acc_noise_density": 1.0, "variance_scale": 1.0}, likelihood=False)
    assert "not a likelihood" in plain[0] and not any("(curvature)" in line for line in plain[1:])
    assert [("flat" in line) for line in plain[1:]] == [bool(r > math.log10(FLAT_FACTOR)) for r in cur.robust_std]


def test_no_minimum_means_infinite_std():
    blocks = lambda x: np.array([-(x[0] ** 2)])  # noqa: E731  (a maximum, not a minimum)
    cur = curvature(blocks, np.zeros(1), ("acc_noise_density",), [(-6.0, 1.0)])
    assert cur.hessian[0, 0] == pytest.approx(-2.0)
    assert math.isinf(cur.std[0]) and "inf" in cur.lines({"acc_noise_density": 1.0})[1]


def test_steps_stay_inside_the_limits():
    seen = []

    def blocks(x):
        seen.append(x.copy())
        return np.array([float(np.sum(x**2))])

    curvature(blocks, np.array([0.95]), ("variance_scale",), [(-1.0, 1.0)])
    assert max(x[0] for x in seen) <= 1.0


def test_the_by_flight_sandwich_sums_each_flights_blocks_first():
    """Two flights of two blocks and one of one: J over flights uses the per-flight sums of the block gradients,
    times G/(G−1). Blocks of one flight whose tilts agree (a flight-wide error) widen it; the 10 s sandwich,
    which treats them as independent, does not see that."""
    a = np.array([[30.0, 5.0], [5.0, 10.0]])
    tilt = np.array([[1.0, 0.5], [1.0, 0.5], [-1.0, 0.2], [-1.0, 0.2], [0.0, -1.4]])  # per block; they sum to 0

    def blocks(x: np.ndarray) -> np.ndarray:
        return np.array([0.1 * x @ a @ x for _ in range(5)]) + tilt @ x

    cur = curvature(blocks, np.zeros(2), ("acc_noise_density", "gyro_noise_density"), [(-6.0, 6.0)] * 2,
                    block_counts=[2, 2, 1])  # fmt: skip
    inv = np.linalg.inv(a)  # the sum over 5 blocks of 0.1·xᵀAx has Hessian A
    per_flight = np.array([tilt[0] + tilt[1], tilt[2] + tilt[3], tilt[4]])
    expected = np.sqrt(np.diag(inv @ (per_flight.T @ per_flight * 3 / 2) @ inv))
    np.testing.assert_allclose(cur.flight_std, expected, rtol=1e-6)
    assert cur.flights == 3 and np.all(cur.flight_std > cur.robust_std)
    assert "(by flight)" in cur.lines({"acc_noise_density": 1.0, "gyro_noise_density": 1.0})[1]


def test_no_by_flight_sandwich_from_fewer_than_three_flights_and_counts_must_match():
    a = np.array([[40.0, 10.0], [10.0, 20.0]])
    blocks, _ = quadratic_blocks(a, np.zeros(2), np.array([0.5, 0.5]))
    names, limits = ("acc_noise_density", "gyro_noise_density"), [(-6.0, 6.0)] * 2
    cur = curvature(blocks, np.zeros(2), names, limits, block_counts=[1, 1])
    assert cur.flight_std is None and "by flight" not in " ".join(cur.lines(dict.fromkeys(names, 1.0)))
    with pytest.raises(ValueError, match="block_counts"):
        curvature(blocks, np.zeros(2), names, limits, block_counts=[1, 2])
