"""Item 24 of README.md: where a run's fused filter leaves the 95 % NEES bounds, per test flight, and why.

Reads ``<run>/<evaluation>/estimates/<flight>/<method>/updates.csv`` (``velobins evaluate``'s per-update NEES
of the fused velocity, and the network's estimates with their variances, already times the run's s) and prints
the share of updates below the χ²(3) 95 % bounds (the filter under-confident) and above them (over-confident),
over all flights and per flight; per flight also the network's RMS error in the body frame and its RMS σ̂
(√ of the mean variance), to see whether σ̂ follows the error from flight to flight. Usage:

    python nees_tails.py eval_nb9 runs/recipe28/n16_5min_reg_paper runs/recipe28/n16_5min_gh_valfloor
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_gap import flight_body_frame  # this folder: one flight's updates in the body frame

from velobins_common.stats import NEES_BOUNDS

LOW, HIGH = NEES_BOUNDS
"""The χ²(3) 95 % bounds ``velobins evaluate`` counts inside."""


def tail_shares(run: Path, evaluation: str) -> None:
    per_flight, every = [], []
    for updates in sorted(run.glob(f"{evaluation}/estimates/*/*/updates.csv")):
        u = pd.read_csv(updates)
        values = u["nees"].to_numpy()
        every.append(values)
        truth, estimate, sigma = flight_body_frame(u)
        rms, sigma_rms = np.sqrt(np.mean((estimate - truth) ** 2)), np.sqrt(np.mean(sigma**2))
        tails = f"{(values < LOW).mean():.0%} / {(values > HIGH).mean():.0%}"
        per_flight.append(f"{updates.parts[-3]} {tails} (RMS {rms:.3f}, σ̂ {sigma_rms:.3f})")
    if not every:
        sys.exit(f"nees_tails: no {evaluation}/estimates/*/*/updates.csv under {run}")
    values = np.concatenate(every)
    print(
        f"{run.name}: below {(values < LOW).mean():.1%}, above {(values > HIGH).mean():.1%}; " + ", ".join(per_flight)
    )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for folder in sys.argv[2:]:
        tail_shares(Path(folder), sys.argv[1])
