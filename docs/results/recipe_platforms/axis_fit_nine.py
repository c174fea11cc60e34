"""Item 25 of README.md: a variance factor per body axis, fitted on the nine calibration flights, on NanoBench val.

``variance_map_probe.py --per-axis`` scores factors on the test flights themselves (an oracle). This script picks
them the way ``calibrate`` picks s: by the posterior NLL of the fused velocity on the nine calibration flights of
every style (``cal9_flights.txt``), replayed offline from ``velobins evaluate``'s saved estimates there (with the
run's nine-flight overlay: the variances already times its s), over a grid of (x, y, z) factors. Then it scores
the picked factors on the 4 NanoBench val flights (``eval_nb9``), beside factors 1. Same filter as
``variance_map_probe.py`` (NanoBench's, with the IMU noise fitted on the nine flights). Usage:

    # per run R, first: velobins evaluate ... --data CAL9 --params R/overlay_nb9.yaml --out R/eval_on_cal9
    python axis_fit_nine.py CAL9 runs/recipe28/n16_5min_gh_valfloor runs/recipe28/n16_5min_reg_paper
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
from axis_scale_probe import flights_in, saved_updates, score  # this folder: loading, the per-axis replay
from variance_map_probe import FILTER, VAL  # this folder: item 24's filter and test flights

AXIS_GRID = list(itertools.product((0.25, 0.5, 1.0, 2.0), (0.5, 1.0, 2.0), (0.5, 1.0, 2.0)))
"""The (x, y, z) factors tried; x reaches lower because the floor's σ̂ is widest there (item 25)."""
UNIT = (1.0, 1.0, 1.0)


def print_fit(name: str, fits: dict, best: tuple, val: dict, on_val: dict, config=FILTER) -> None:
    """Two lines for run ``name``: factors 1 and the ``best`` ones, each with its calibration-flight figures
    (``fits[k]``: fused AVE, NLL, share in bounds) and its figures on the ``val`` flights, fused by ``config``."""
    for label, k in (("factors 1", UNIT), (f"factors {best} (nine-flight NLL)", best)):
        c, v = fits[k], score(val, on_val, np.asarray(k), config)
        print(
            f"{name} {label}: nine flights NLL {c[1]:.3f}, {c[2]:.1%} in bounds; "
            f"val fused AVE {v[0]:.3f}, NLL {v[1]:.3f}, {v[2]:.1%} in bounds",
            flush=True,
        )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cal, val = flights_in(Path(sys.argv[1]), "nanobench"), flights_in(VAL, "nanobench")
    for run in map(Path, sys.argv[2:]):
        on_cal, on_val = saved_updates(run / "eval_on_cal9", cal), saved_updates(run / "eval_nb9", val)
        fits = {k: score(cal, on_cal, np.asarray(k), FILTER) for k in AXIS_GRID}
        print_fit(run.name, fits, min(AXIS_GRID, key=lambda k: fits[k][1]), val, on_val)
