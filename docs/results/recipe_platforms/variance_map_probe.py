"""Item 24 of README.md: can a map of the network's variances lift a run's NEES share on NanoBench val?

Re-runs the EKF offline on the estimates a run's evaluation saved (``updates.csv``: ``net_v*`` and ``net_var*``,
the variances already times the run's calibrated s) with R = k·m·(σ̂²/m)^γ, m the median saved variance: k
alone is another s, γ > 1 widens the spread between confident and unsure windows. Scored on the 4 NanoBench val
flights (fused AVE, posterior NLL, NEES share in the 95 % bounds) with NanoBench's filter and the IMU noise
``velobins calibrate`` fitted on the nine calibration flights (``nanobench_cal9_imu.yaml``). An oracle on the
test flights, not a recipe. Usage:

    python variance_map_probe.py eval_nb9 runs/recipe28/n16_5min_gh_valfloor runs/recipe28/n16_5min_reg_paper
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_scale_probe import fused_figures  # this folder: scoring by velobins evaluate's own functions

from velobins_data.datasets import load_flight
from velobins_ekf.offline import run_offline
from velobins_eval.evaluate import ground_truth_state, load_ekf_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FILTER = load_ekf_config([ROOT / "velobins_bringup" / "config" / "nanobench.yaml", HERE / "nanobench_cal9_imu.yaml"])
VAL = ROOT.parent / "shared" / "data" / "nanobench" / "val"
MAPS = ((1.0, 1.0), (1.0, 0.5), (1.0, 2.0), (1.0, 4.0), (1.0, 8.0), (1.5, 1.0), (2.0, 1.0), (2.0, 0.7), (3.0, 0.5))
"""(γ, k) pairs scored; (1, 1) is the run's own evaluation."""


def mapped_figures(flights: dict, saved: dict[str, pd.DataFrame], gamma: float, k: float) -> np.ndarray:
    """Mean over flights of (fused AVE, posterior NLL, NEES share) with the variances mapped by (γ, k)."""
    median = np.median(np.vstack([u[["net_var_x", "net_var_y", "net_var_z"]].to_numpy() for u in saved.values()]))
    figures = []
    for name, seq in flights.items():
        u = saved[name]
        var = k * median * (u[["net_var_x", "net_var_y", "net_var_z"]].to_numpy() / median) ** gamma
        res = run_offline(
            seq.t,
            seq.acc,
            seq.gyro,
            u.t.to_numpy(),
            u[["net_vx", "net_vy", "net_vz"]].to_numpy(),
            np.einsum("ni,ij->nij", var, np.eye(3)),
            init_state=ground_truth_state(seq),
            config=FILTER,
        )
        ups = [x for x in res.updates if x.accepted]
        stamps = np.array([x.stamp for x in ups])
        vel, cov = np.array([x.vel_world for x in ups]), np.array([x.vel_world_cov for x in ups])
        figures.append(fused_figures(seq, stamps, vel, cov))
    return np.mean(figures, axis=0)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    val = {p.name.removesuffix(".csv.gz"): load_flight("nanobench", p) for p in sorted(VAL.glob("*.csv.gz"))}
    for run in map(Path, sys.argv[2:]):
        estimates = run / sys.argv[1] / "estimates"
        saved = {name: pd.read_csv(next((estimates / name).glob("*/updates.csv"))) for name in val}
        for gamma, k in MAPS:
            fused, nll, inside = mapped_figures(val, saved, gamma, k)
            print(f"{run.name} γ {gamma:g} k {k:g}: fused AVE {fused:.3f}, NLL {nll:.3f}, in bounds {inside:.1%}")
