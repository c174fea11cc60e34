"""The shared helpers of the lowest layer."""

from __future__ import annotations

import math

import numpy as np

from velobins_common.constants import RPM_TO_RAD_PER_S, STANDARD_GRAVITY
from velobins_common.interp import interp_columns


def test_constants() -> None:
    assert STANDARD_GRAVITY == 9.80665
    assert 60.0 * RPM_TO_RAD_PER_S == math.tau


def test_interp_columns_is_linear_holds_the_ends_and_copies_equal_stamps() -> None:
    t = np.array([0.0, 1.0, 3.0])
    values = np.array([[0.0, 10.0], [2.0, 20.0], [6.0, 0.0]])
    out = interp_columns(np.array([-1.0, 0.5, 2.0, 9.0]), t, values)
    np.testing.assert_allclose(out, [[0.0, 10.0], [1.0, 15.0], [4.0, 10.0], [6.0, 0.0]])
    same = interp_columns(t.copy(), t, values)
    np.testing.assert_array_equal(same, values)
    assert same is not values


def test_interp_columns_single_sample_and_query_between_samples() -> None:
    np.testing.assert_array_equal(
        interp_columns(np.array([0.0, 5.0]), np.array([1.0]), np.array([[3.0]])), [[3.0], [3.0]]
    )
    out = interp_columns(np.array([0.25]), np.array([0.0, 1.0]), np.array([[0.0, -4.0], [4.0, 4.0]]))
    np.testing.assert_allclose(out, [[1.0, -2.0]])
