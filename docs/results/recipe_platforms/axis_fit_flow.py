"""Item 39 of README.md: item 25's variance factor per body axis, on the flows of items 30-38 (``flow.sh``).

For each flow folder (``STUDY/flow/NAME``: ``overlay.yaml``, ``eval_val``, and ``eval_cal9`` — ``velobins
evaluate`` of the same checkpoint and overlay on the nine calibration flights), pick (x, y, z) factors on the
saved network variances (already times the overlay's s, and its disagreement weight for an ensemble) the way
``calibrate`` picks s: by the fused velocity's posterior NLL on the nine flights, replayed offline over item 25's
grid, or with ``--continuous`` by a bounded search over log10 factors in [-2, 2] (what a fit per axis in
``calibrate`` would find; the grid's edges bind). Then score the picked factors on NanoBench val beside factors 1.
The filter is the flow's: NanoBench's file, the nine flights' IMU noise, the gyro-bias prior and the overlay.
Usage:

    python axis_fit_flow.py [--continuous] STUDY/cal9 STUDY/flow/NAME...
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from axis_fit_nine import AXIS_GRID, UNIT, print_fit  # this folder: item 25's grid and its report
from axis_scale_probe import _fail, flights_in, saved_updates, score  # this folder: loading, the per-axis replay
from scipy.optimize import minimize
from variance_map_probe import VAL  # this folder: the test flights

from velobins_eval.evaluate import load_ekf_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FILES = [
    ROOT / "velobins_bringup" / "config" / "nanobench.yaml",
    HERE / "nanobench_cal9_imu.yaml",
    HERE / "gyro_prior.yaml",
]
"""flow.sh's --params, in its order; each flow's overlay.yaml goes last."""


def continuous_fit(nll) -> tuple[float, float, float]:
    """The (x, y, z) factors minimising ``nll(factors)``, searched in log10 space within [-2, 2] (Powell)."""
    res = minimize(lambda z: nll(10.0**z), np.zeros(3), method="Powell", bounds=[(-2.0, 2.0)] * 3)
    return tuple(float(round(f, 3)) for f in 10.0**res.x)


if __name__ == "__main__":
    args = sys.argv[1:]
    continuous = "--continuous" in args
    args = [a for a in args if a != "--continuous"]
    if len(args) < 2:
        sys.exit(__doc__)
    cal, val = flights_in(Path(args[0]), "nanobench"), flights_in(VAL, "nanobench")
    for flow in map(Path, args[1:]):
        try:
            config = load_ekf_config([*FILES, flow / "overlay.yaml"])
        except (ValueError, OSError) as exc:  # a flow without its overlay, or a bad one: one line, exit 2
            sys.exit(_fail(str(exc)))
        on_cal, on_val = saved_updates(flow / "eval_cal9", cal), saved_updates(flow / "eval_val", val)
        if continuous:
            best = continuous_fit(lambda k, on_cal=on_cal, config=config: score(cal, on_cal, k, config)[1])
            fits = {k: score(cal, on_cal, np.asarray(k), config) for k in (UNIT, best)}
        else:
            fits = {k: score(cal, on_cal, np.asarray(k), config) for k in AXIS_GRID}
            best = min(AXIS_GRID, key=lambda k: fits[k][1])
        print_fit(flow.name, fits, best, val, on_val, config)
