"""Items 24 and 25 of README.md: can a map of the network's variances lift a run's NEES share on NanoBench val?

Re-runs the EKF offline on the estimates a run's evaluation saved (``updates.csv``: ``net_v*`` and ``net_var*``,
the variances already times the run's calibrated s) with R = k·m·(σ̂²/m)^γ, m the median saved variance: k
alone is another s, γ > 1 widens the spread between confident and unsure windows. Scored on the 4 NanoBench val
flights (fused AVE, posterior NLL, NEES share in the 95 % bounds) with NanoBench's filter and the IMU noise
``velobins calibrate`` fitted on the nine calibration flights (``nanobench_cal9_imu.yaml``). An oracle on the
test flights, not a recipe. With ``--per-flight``, each test flight gets its own k instead (the one of
``PER_FLIGHT_K`` with the most updates in bounds): the ceiling of a σ̂ that told flights apart. With
``--per-axis``, the variances of each body axis get their own factor instead (``PER_AXIS_K``, item 25): what an s
per axis would give. With ``--speed-term``, R = k·σ̂² + b·m·‖v̂‖² per axis instead (``SPEED_TERMS``, item 26; v̂
the network's own estimate, so a filter could do it in flight): a noise that grows with speed. Usage:

    python variance_map_probe.py eval_nb9 runs/recipe28/n16_5min_gh_valfloor runs/recipe28/n16_5min_reg_paper
    python variance_map_probe.py --per-flight eval_nb9 runs/recipe28/n16_5min_gh_valfloor
    python variance_map_probe.py --per-axis eval_nb9 runs/recipe28/n16_5min_gh_valfloor
    python variance_map_probe.py --speed-term eval_nb9 runs/recipe28/n16_5min_gh_valfloor
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_scale_probe import (  # this folder: the offline replay, its scoring and loading
    ESTIMATE_COLUMNS,
    VAR_COLUMNS,
    flights_in,
    replay_flight,
    replay_mean,
    saved_updates,
    score,
)

from velobins_data.flight import Flight
from velobins_eval.evaluate import load_ekf_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FILTER = load_ekf_config([ROOT / "velobins_bringup" / "config" / "nanobench.yaml", HERE / "nanobench_cal9_imu.yaml"])
VAL = ROOT.parent / "shared" / "data" / "nanobench" / "val"
MAPS = ((1.0, 1.0), (1.0, 0.5), (1.0, 2.0), (1.0, 4.0), (1.0, 8.0), (1.5, 1.0), (2.0, 1.0), (2.0, 0.7), (3.0, 0.5))
"""(γ, k) pairs scored; (1, 1) is the run's own evaluation."""
PER_FLIGHT_K = (0.25, 0.5, 1.0, 2.0, 4.0)
"""The factors on s tried per flight with ``--per-flight``."""
PER_AXIS_K = ((1.0, 1.0, 1.0), (0.5, 1.0, 1.0), (0.25, 1.0, 1.0), (2.0, 1.0, 1.0), (1.0, 1.0, 0.5), (0.5, 1.5, 1.5))
"""The (x, y, z) factors on the variances tried with ``--per-axis`` (body axes; the floor's σ̂ is widest on x)."""
SPEED_TERMS = tuple((k, b) for k in (1.0, 0.5, 0.25) for b in (0.0, 0.5, 1.0, 2.0, 4.0))
"""The (k, b) pairs of ``--speed-term``: k on the saved variances, b [per (m/s)²] on m·‖v̂‖²."""


def median_variance(saved: dict[str, pd.DataFrame]) -> float:
    """m: the median of every saved variance of every flight (the maps' reference level)."""
    return float(np.median(np.vstack([u[VAR_COLUMNS].to_numpy() for u in saved.values()])))


def mapped_figures(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], gamma: float, k: float) -> np.ndarray:
    """Mean over flights of (fused AVE, posterior NLL, NEES share) with the variances mapped by (γ, k)."""
    m = median_variance(saved)
    return np.asarray(replay_mean(flights, saved, lambda u: k * m * (u[VAR_COLUMNS].to_numpy() / m) ** gamma, FILTER))


def per_axis_figures(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], label: str) -> None:
    """Print mean fused AVE, NLL and NEES share with each body axis's variances times its factor (``PER_AXIS_K``)."""
    for k in PER_AXIS_K:
        fused, nll, inside = score(flights, saved, np.asarray(k), FILTER)
        print(f"{label} k (x, y, z) {k}: fused AVE {fused:.3f}, NLL {nll:.3f}, in bounds {inside:.1%}")


def speed_term_figures(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], label: str) -> None:
    """Print mean fused AVE, NLL and NEES share with R = k·σ̂² + b·m·‖v̂‖² on every axis (``SPEED_TERMS``)."""
    m = median_variance(saved)

    def speed_term(u: pd.DataFrame, k: float, b: float) -> np.ndarray:
        speed2 = np.sum(u[ESTIMATE_COLUMNS].to_numpy() ** 2, axis=1, keepdims=True)
        return k * u[VAR_COLUMNS].to_numpy() + b * m * speed2

    for k, b in SPEED_TERMS:
        fused, nll, inside = replay_mean(flights, saved, lambda u, k=k, b=b: speed_term(u, k, b), FILTER)
        print(f"{label} k {k:g} b {b:g}: fused AVE {fused:.3f}, NLL {nll:.3f}, in bounds {inside:.1%}")


def per_flight_ceiling(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], label: str) -> None:
    """Print each flight's NEES share at every k of ``PER_FLIGHT_K`` and the mean share at each flight's best."""
    best = []
    for name, seq in flights.items():
        u = saved[name]
        var = u[VAR_COLUMNS].to_numpy()
        shares = [replay_flight(seq, u, k * var, FILTER)[2] for k in PER_FLIGHT_K]
        print(f"{label} {name}: " + ", ".join(f"k {k:g} {x:.0%}" for k, x in zip(PER_FLIGHT_K, shares, strict=True)))
        best.append(max(shares))
    print(f"{label}: each flight at its best k, {np.mean(best):.1%} in bounds on the mean")


if __name__ == "__main__":
    modes = ("--per-flight", "--per-axis", "--speed-term")
    per_flight, per_axis, speed_term = (mode in sys.argv for mode in modes)
    args = [a for a in sys.argv[1:] if a not in modes]
    if len(args) < 2:
        sys.exit(__doc__)
    val = flights_in(VAL, "nanobench")
    for run in map(Path, args[1:]):
        saved = saved_updates(run / args[0], val)
        if per_flight:
            per_flight_ceiling(val, saved, run.name)
            continue
        if per_axis:
            per_axis_figures(val, saved, run.name)
            continue
        if speed_term:
            speed_term_figures(val, saved, run.name)
            continue
        for gamma, k in MAPS:
            fused, nll, inside = mapped_figures(val, saved, gamma, k)
            print(f"{run.name} γ {gamma:g} k {k:g}: fused AVE {fused:.3f}, NLL {nll:.3f}, in bounds {inside:.1%}")
