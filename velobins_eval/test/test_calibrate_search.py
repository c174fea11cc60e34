"""Search steps of ``velobins_eval.calibrate_search`` that the end-to-end calibrate tests do not isolate."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from velobins_eval.calibrate_search import refine


def test_refine_starts_inside_the_boxes_when_the_best_point_lies_outside():
    """A variance scale that starts at 1 (log10 0) while its box is centred on the network's own errors
    ([−3.1, −0.1] decades here) must not make scipy warn or search outside the box: it starts from the
    projection and still finds the minimum inside."""
    calls: list[float] = []

    def value(x: np.ndarray) -> float:
        calls.append(float(x[0]))
        return float((x[0] + 1.0) ** 2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an OptimizeWarning ("initial guess is not within the bounds") fails
        x, f, _ = refine(value, np.array([0.0]), 1.0, [(-3.1, -0.1)], max_evals=60)
    assert x[0] == pytest.approx(-1.0, abs=0.02) and f < 1e-3
    assert all(-3.1 <= c <= -0.1 for c in calls)


def test_refine_keeps_the_start_when_nothing_inside_is_better():
    """The start (outside the box) is returned with its value when every point searched is worse."""
    x, f, _ = refine(lambda x: float((x[0] - 1.0) ** 2), np.array([1.0]), 0.0, [(-2.0, 0.0)], max_evals=30)
    assert x[0] == 1.0 and f == 0.0
