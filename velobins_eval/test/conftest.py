"""Fixtures of the velobins_eval tests that several test files share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def calibration_flights() -> list:
    """Two simulated nano flights of 15 s (acc 0.01 m/s²/√Hz, gyro 0.001 rad/s/√Hz) with 0.05 m/s measurements
    (``CalibrationFlight``s): the calibrate tests' small data. Tests replace fields, never change them in place."""
    import numpy as np

    from velobins_data.sim.flight import simulate_flight
    from velobins_eval.calibrate_fit import synthetic_measurements

    seqs = [
        simulate_flight("nano", fam, 15.0, seed, index=i)
        for i, (fam, seed) in enumerate((("figure8", 1), ("helix", 2)))
    ]
    rng = np.random.default_rng(0)
    return [synthetic_measurements(s, 0.05, rng) for s in seqs]


SHIPPED = ("crazyflie", "crazyflie-reg")
"""The shipped models, evaluated by name (each brings its EKF overlay)."""


@pytest.fixture(scope="session")
def demo_evaluation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report folder of ``velobins evaluate`` with both shipped models (by name, so with their overlays) on the
    two shipped demo flights: the report the results tests (TUM, CSV, MCAP, HTML, score) check."""
    import torch

    from velobins_eval.cli import main
    from velobins_eval.demo import DEMO_DATA

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("demo_evaluation") / "report"
    argv = ["evaluate", *(a for name in SHIPPED for a in ("--checkpoint", name))]
    assert main([*argv, "--dataset", "nanobench", "--data", str(DEMO_DATA), "--out", str(out)]) == 0
    return out
