"""Item 24 of README.md: where a run's fused filter leaves the 95 % NEES bounds, per test flight.

Reads ``<run>/<evaluation>/estimates/<flight>/<method>/updates.csv`` (``velobins evaluate``'s per-update NEES
of the fused velocity) and prints the share of updates below the χ²(3) 95 % bounds (the filter
under-confident) and above them (over-confident), over all flights and per flight. Usage:

    python nees_tails.py eval_nb9 runs/recipe28/n16_5min_reg_paper runs/recipe28/n16_5min_gh_valfloor
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from velobins_common.stats import NEES_BOUNDS

LOW, HIGH = NEES_BOUNDS
"""The χ²(3) 95 % bounds ``velobins evaluate`` counts inside."""


def tail_shares(run: Path, evaluation: str) -> None:
    per_flight, every = [], []
    for updates in sorted(run.glob(f"{evaluation}/estimates/*/*/updates.csv")):
        values = pd.read_csv(updates)["nees"].to_numpy()
        every.append(values)
        per_flight.append(f"{updates.parts[-3]} {(values < LOW).mean():.0%} / {(values > HIGH).mean():.0%}")
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
