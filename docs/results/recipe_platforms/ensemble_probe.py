"""Item 27 of README.md: does an ensemble's disagreement tell the floor's easy flights from its hard ones?

Items 24–26 found that the floor's σ̂ hardly separates the slow trefoil from the fast one, where its errors differ
twofold, and that no map of σ̂ or filter-side rule finds the per-flight s (85–89 % in bounds) that would close the
`n16` NEES gap. What a single network's bins cannot carry is its *epistemic* uncertainty: how much another
training run would disagree on a flight unlike the training flights. An ensemble measures it. Averaging the
members' bin distributions gives one distribution over the same bins (a mixture), decoded as every G+H^B
distribution is: its mean is the members' mean, its variance the members' mean variance plus the variance of
their means (the disagreement).

For each group of runs (one run, or several joined by commas) the probe reads the members' saved network
estimates (``updates.csv`` of ``velobins evaluate`` run with s = 1, on the nine calibration flights and on the
NanoBench val flights), mixes them, fits s on the nine flights by the posterior NLL of the fused velocity (the
objective ``velobins calibrate --fit variance_scale`` minimises; a log-grid then a finer one), replays val with
that s, and prints the network AVE, fused AVE, posterior NLL and NEES share, and per flight the RMS error, RMS σ̂
and RMS disagreement in the body frame. The filter is item 24's nine-flight filter (``nanobench.yaml`` and
``nanobench_cal9_imu.yaml``). An offline study of a product option, not the product. Usage:

    python ensemble_probe.py CAL9_DIR CAL_EVAL VAL_EVAL GROUP...
    python ensemble_probe.py runs/recipe29/cal9 eval_cal9_raw eval_val_raw \\
        runs/recipe29/n16_5min_gh_valfloor runs/recipe29/n16_5min_gh_valfloor,runs/recipe29/n16_5min_gh_valfloor_s1
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from axis_gap import flight_body_frame  # this folder: one flight's updates in the body frame
from axis_scale_probe import ESTIMATE_COLUMNS, VAR_COLUMNS, _fail, flights_in, replay_mean, saved_updates
from variance_map_probe import FILTER, VAL

from velobins_common.stats import exponential_average
from velobins_data.flight import Flight
from velobins_eval.metrics import ave
from velobins_net.ensemble import mixture_moments

COARSE = [2.0**k for k in np.arange(-4.0, 4.01, 0.5)]
"""First grid of s (log2 steps of 0.5 from 1/16 to 16)."""
FINE_STEPS = np.arange(-0.375, 0.376, 0.125)
"""Second grid: log2 offsets around the coarse grid's best."""


DIS_COLUMNS = ["dis_x", "dis_y", "dis_z"]
"""The members' disagreement (variance of their estimates) per body axis, in a :func:`mixture`'s tables."""


def mixture(members: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """One table of updates per flight: the members' mean estimate, their mean variance plus the variance of their
    estimates (the decoded variance of the average of their bin distributions), and ``dis_*``, that second part.
    Members must have been evaluated on the same windows (the same stamps); exits 2 naming the flight if not."""
    mixed = {}
    for name, first in members[0].items():
        tables = [m[name] for m in members]
        if any(len(u) != len(first) or not np.allclose(u.t.to_numpy(), first.t.to_numpy()) for u in tables):
            sys.exit(_fail(f"{name}: the members' updates are at different stamps (evaluate them alike)"))
        means = torch.from_numpy(np.stack([u[ESTIMATE_COLUMNS].to_numpy() for u in tables]))
        variances = torch.from_numpy(np.stack([u[VAR_COLUMNS].to_numpy() for u in tables]))
        mean, variance, disagreement = (x.numpy() for x in mixture_moments(means, variances))  # the product's
        u = first.copy()
        u[ESTIMATE_COLUMNS], u[VAR_COLUMNS], u[DIS_COLUMNS] = mean, variance, disagreement
        mixed[name] = u
    return mixed


def fitted_scale(flights: dict[str, Flight], saved: dict[str, pd.DataFrame]) -> float:
    """s minimising the mean posterior NLL of the fused velocity on ``flights`` (a log-grid, then a finer one)."""

    def nll(s: float) -> float:
        return replay_mean(flights, saved, lambda u: s * u[VAR_COLUMNS].to_numpy(), FILTER)[1]

    best = min(COARSE, key=nll)
    return min((best * 2.0**k for k in FINE_STEPS), key=nll)


TWO_SCALES = [(2.0**a, b) for a in np.arange(-3.0, 3.01, 1.0) for b in (0.0, 4.0, 16.0, 64.0, 256.0, 1024.0)]
"""The first (a, b) grid of ``--two-scales``: R = a·(the mixture's variance) + b·(the members' averaged
disagreement); then a finer one around its best (a × 2^±½, b × 2^±1)."""


def two_scale_map(a: float, b: float, tau: float):
    """R = a·σ̄² + b·d̄ of a mixture's updates, d̄ the disagreement averaged over ``tau`` as the predictor averages
    it (``predictor.variance_scale`` a, ``disagreement_scale`` b, ``disagreement_tau`` τ)."""

    def variances(u: pd.DataFrame) -> np.ndarray:
        return a * u[VAR_COLUMNS].to_numpy() + b * exponential_average(u.t.to_numpy(), u[DIS_COLUMNS].to_numpy(), tau)

    return variances


def per_flight(saved: dict[str, pd.DataFrame], s: float) -> list[str]:
    """Per flight: RMS error, RMS σ̂ (times s) and RMS disagreement (times s), body frame, over the three axes."""
    rows = []
    for name, u in saved.items():
        truth, estimate, sigma = flight_body_frame(u)
        dis = np.sqrt(s * u[["dis_x", "dis_y", "dis_z"]].to_numpy().mean()) if "dis_x" in u else 0.0
        rms, spread = np.sqrt(np.mean((estimate - truth) ** 2)), np.sqrt(s * np.mean(sigma**2))
        rows.append(f"{name} RMS {rms:.3f} σ̂ {spread:.3f} dis {dis:.3f}")
    return rows


def network_ave(saved: dict[str, pd.DataFrame]) -> float:
    """Mean over flights of the network's AVE in the body frame (``velobins evaluate``'s net AVE)."""
    return float(np.mean([ave(est, truth) for truth, est, _ in map(flight_body_frame, saved.values())]))


def two_scales(cal, on_cal, val, on_val, label: str, tau: float) -> None:
    """Fit (a, b) of :func:`two_scale_map` on the nine flights by the posterior NLL; print val's figures."""

    def objective(ab: tuple[float, float]) -> float:
        return replay_mean(cal, on_cal, two_scale_map(*ab, tau), FILTER)[1]

    a0, b0 = min(TWO_SCALES, key=objective)
    a, b = min(((a0 * 2.0**i, b0 * 2.0**j) for i in (-0.5, 0.0, 0.5) for j in (-1, 0, 1)), key=objective)
    fused, nll, inside = replay_mean(val, on_val, two_scale_map(a, b, tau), FILTER)
    print(
        f"{label} two scales (τ {tau:g} s): a {a:g} b {b:g}; val fused AVE {fused:.3f}, NLL {nll:.3f}, "
        f"in bounds {inside:.1%}"
    )


def main(cal9: Path, cal_eval: str, val_eval: str, groups: list[str], taus: list[float] | None = None) -> None:
    cal, val = flights_in(cal9, "nanobench"), flights_in(VAL, "nanobench")
    for group in groups:
        runs = [Path(r) for r in group.split(",")]
        on_cal = mixture([saved_updates(r / cal_eval, cal) for r in runs])
        on_val = mixture([saved_updates(r / val_eval, val) for r in runs])
        if taus is not None:
            for tau in taus:
                two_scales(cal, on_cal, val, on_val, "+".join(r.name for r in runs), tau)
            continue
        s = fitted_scale(cal, on_cal)
        fused, nll, inside = replay_mean(val, on_val, lambda u, s=s: s * u[VAR_COLUMNS].to_numpy(), FILTER)
        label = "+".join(r.name for r in runs)
        print(
            f"{label}: s {s:.3g}; val network AVE {network_ave(on_val):.3f}, fused AVE {fused:.3f}, "
            f"NLL {nll:.3f}, in bounds {inside:.1%}"
        )
        print("    " + "; ".join(per_flight(on_val, s)), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    taus = None
    if args and args[0].startswith("--two-scales="):
        taus = [float(x) for x in args.pop(0).split("=", 1)[1].split(",")]
    if len(args) < 4:
        sys.exit(__doc__)
    main(Path(args[0]), args[1], args[2], args[3:], taus)
