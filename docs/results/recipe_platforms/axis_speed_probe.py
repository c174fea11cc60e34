"""Item 41 of README.md: would a noise term that grows with each axis's own speed carry from flights to flights?

``axis_by_flight.py`` finds a flight's own variance scale on an axis growing with its motion along that axis
(rank correlation 0.85–0.93 on z on the simulated ``nano``), so a constant factor per axis fitted on flights with
more vertical motion than the test flights over-inflates z there. This replays the EKF offline on the estimates
``velobins evaluate`` saved (``updates.csv``, the variances as the filter used them: s, b, factors 1) with

    R_i = k·R̂_i + c·v̂_i²        (per body axis i, v̂ the network's own estimate, so a filter can do it in flight)

a relative error √c of the speed along the axis, with ``--z-only`` on z alone. (k, c) is picked on a grid by the
posterior NLL on the calibration flights (``calibrate``'s objective), then scored on the test flights beside
(1, 0). Usage:

    python axis_speed_probe.py FILTER.yaml... -- CAL_FLIGHTS CAL_EVAL TEST_FLIGHTS TEST_EVAL [--z-only]

FILTER.yaml are the parameter files of the evaluations (the IMU overlay, then the run's overlay).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_scale_probe import ESTIMATE_COLUMNS, VAR_COLUMNS, flights_in, replay_mean, saved_updates

from velobins_eval.evaluate import load_ekf_config

K_GRID = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4)
"""Factors on the saved R (the run's s is already in it): c takes variance from R̂, so k may fall."""
C_GRID = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Squared relative errors: √c of the speed along the axis (0.22–2.2 of it; the saved R already holds s ≈ 10)."""


def speed_variances(k: float, c: float, axes: np.ndarray):
    """A map of saved updates to (N, 3) variances k·R̂ + c·v̂² on ``axes`` (a 0/1 mask, 3) and k·R̂ elsewhere."""

    def variances(u: pd.DataFrame) -> np.ndarray:
        return k * u[VAR_COLUMNS].to_numpy() + c * axes * u[ESTIMATE_COLUMNS].to_numpy() ** 2

    return variances


def main(args: list[str]) -> int:
    z_only = "--z-only" in args
    args = [a for a in args if a != "--z-only"]
    if "--" not in args or len(args) - args.index("--") != 5:
        sys.exit(__doc__)
    split = args.index("--")
    config = load_ekf_config([Path(p) for p in args[:split]])
    cal_dir, cal_eval, test_dir, test_eval = (Path(p) for p in args[split + 1 :])
    cal, test = flights_in(cal_dir), flights_in(test_dir)
    cal_saved, test_saved = saved_updates(cal_eval, cal), saved_updates(test_eval, test)
    axes = np.array([0.0, 0.0, 1.0]) if z_only else np.ones(3)
    fits = {}
    for k, c in itertools.product(K_GRID, C_GRID):
        ave, nll, inside = fits[(k, c)] = replay_mean(cal, cal_saved, speed_variances(k, c, axes), config)
        print(f"cal k {k:g} c {c:g}: fused AVE {ave:.4f}, NLL {nll:.4f}, in {inside:.1%}")
    best = min(fits, key=lambda key: fits[key][1])
    for label, (k, c) in (("none", (1.0, 0.0)), ("fitted", best)):  # (1, 0) is on the grid
        ave, nll, inside = replay_mean(test, test_saved, speed_variances(k, c, axes), config)
        print(
            f"test {label} (k {k:g}, c {c:g}{', z only' if z_only else ''}): fused AVE {ave:.4f}, posterior NLL"
            f" {nll:.4f}, in bounds {inside:.1%} (cal NLL {fits[(k, c)][1]:.4f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
