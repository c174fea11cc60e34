"""Item 20 of README.md: a variance scale per axis from the moments of the network's errors, no filter fit.

For an average of correlated errors the variance a white model must assume is the errors' own variance times the
integrated autocorrelation, 1 + 2 Σ_k ρ(k) (summed up to the first lag where ρ ≤ 0). Per body axis a::

    s_a = mean(e_a² / σ̂_a²) · (1 + 2 Σ_k ρ_a(k)),   ρ_a the autocorrelation of e_a / σ̂_a at lag k

on the nine flights of every style (``eval_calset``: ``velobins evaluate`` on ``STUDY_DIR/sim/rpm_cal`` with the
run's overlay; the saved ``net_var*`` are divided by that evaluation's s). The filter is then re-run on the test
flights' saved estimates (``eval_cal_calset``: the run's s calibrated on the nine flights by ``velobins calibrate``)
with those three scales, and with their mean as one s, and scored as ``velobins evaluate`` scores it (fused AVE,
posterior NLL, NEES share in the 95 % bounds). Filter: ``rpm_imu_noise.yaml``.

Usage: python moment_scale_probe.py STUDY_DIR RUN...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_scale_probe import flights_in, saved_updates, score
from scipy.spatial.transform import Rotation

from velobins_common.stats import autocorrelation
from velobins_eval.evaluate import load_ekf_config

FILTER = load_ekf_config([Path(__file__).resolve().parent / "rpm_imu_noise.yaml"])
MAX_LAG = 100
"""Longest lag of the autocorrelation sum [estimates] (5 s at 20 Hz; the sum stops at the first ρ ≤ 0 before)."""
VAR = ["net_var_x", "net_var_y", "net_var_z"]
NET = ["net_vx", "net_vy", "net_vz"]


def saved_scale(evaluation: Path) -> float:
    """The s an evaluation ran with (its ``config.json``)."""
    return float(json.loads((evaluation / "config.json").read_text())["predictor"]["variance_scale"])


def errors(evaluation: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per flight: (body-frame errors e = z − Rᵀv_true, the network's own variances σ̂²), (U, 3) each."""
    scale, out = saved_scale(evaluation), []
    for folder in sorted((evaluation / "estimates").iterdir()):
        u = pd.read_csv(next(folder.glob("*/updates.csv")))
        rot = Rotation.from_quat(u[["gt_qx", "gt_qy", "gt_qz", "gt_qw"]].to_numpy())
        body = rot.inv().apply(u[["gt_vx", "gt_vy", "gt_vz"]].to_numpy())
        out.append((u[NET].to_numpy() - body, u[VAR].to_numpy() / scale))
    return out


def moment_scales(flights: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(mean e²/σ̂² per axis, 1 + 2 Σ ρ(k) per axis) over all flights (lags within flights only)."""
    own = np.concatenate([e**2 / v for e, v in flights]).mean(axis=0)
    normalised = [e / np.sqrt(v) for e, v in flights]
    rho = autocorrelation([u - u.mean(axis=0) for u in normalised])  # about each flight's mean
    inflation = np.ones(3)
    for a in range(3):
        for k in range(1, min(MAX_LAG + 1, len(rho))):
            if rho[k, a] <= 0:
                break
            inflation[a] += 2 * rho[k, a]
    return own, inflation


def main(study: Path, runs: list[str]) -> None:
    test = flights_in(study / "sim" / "rpm_test")
    for run in runs:
        own, inflation = moment_scales(errors(study / run / "eval_calset"))
        evaluation = study / run / "eval_cal_calset"
        saved_s, saved = saved_scale(evaluation), saved_updates(evaluation, test)
        per_axis = own * inflation
        print(f"{run}: mean e²/σ̂² {np.round(own, 2)}, 1 + 2Σρ {np.round(inflation, 1)}: s {np.round(per_axis, 1)}")
        for label, scales in (
            (f"calibrate's s {saved_s:.1f}", np.full(3, saved_s)),
            ("s per axis by moments", per_axis),
            ("their mean as one s", np.full(3, per_axis.mean())),
        ):
            ave, nll, inside = score(test, saved, scales / saved_s, FILTER)  # the saved σ̂² carry saved_s
            print(f"  {label}: fused AVE {ave:.3f}, posterior NLL {nll:.3f}, in bounds {inside:.1%}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2:])
