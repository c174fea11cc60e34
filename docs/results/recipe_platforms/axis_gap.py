"""Per-axis network errors of study runs on their test flights (round 8 of the recipe study, issue 28).

For each run folder, reads ``eval/estimates/<flight>/<method>/updates.csv`` (written by ``velobins evaluate``)
and prints, per body axis, the slope of the network's estimate against the body-frame truth, the mean error,
the RMS error and the median σ̂, plus the spread of the true body velocity. Usage:

    python docs/results/recipe_platforms/axis_gap.py runs/recipe28/n8_5min_gh_valfloor runs/recipe28/n8_5min_reg_paper
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial.transform import Rotation


def flight_body_frame(u: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(truth, estimate, σ̂), each (N, 3) in the body frame, of one flight's saved updates (``updates.csv``)."""
    world = u[["gt_vx", "gt_vy", "gt_vz"]].to_numpy(copy=True)  # writable: scipy needs it
    truth = Rotation.from_quat(u[["gt_qx", "gt_qy", "gt_qz", "gt_qw"]].to_numpy(copy=True)).inv().apply(world)
    return (
        truth,
        u[["net_vx", "net_vy", "net_vz"]].to_numpy(),
        np.sqrt(u[["net_var_x", "net_var_y", "net_var_z"]].to_numpy()),
    )


def body_truth_and_estimates(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(truth, estimate, σ̂), each (N, 3) in the body frame, over every test flight of ``run``."""
    truth, estimate, sigma = [], [], []
    for updates in sorted(run.glob("eval/estimates/*/*/updates.csv")):
        for stack, part in zip((truth, estimate, sigma), flight_body_frame(pd.read_csv(updates)), strict=True):
            stack.append(part)
    if not truth:
        print(f"axis_gap: no eval/estimates/*/*/updates.csv under {run}", file=sys.stderr)
        sys.exit(2)
    return np.vstack(truth), np.vstack(estimate), np.vstack(sigma)


def main(runs: list[str]) -> None:
    for run in map(Path, runs):
        truth, estimate, sigma = body_truth_and_estimates(run)
        error = estimate - truth
        slope = [np.polyfit(truth[:, i], estimate[:, i], 1)[0] for i in range(3)]
        print(
            f"{run.name}: slope {np.round(slope, 3)}, mean error {np.round(error.mean(0), 3)}, "
            f"RMS {np.round(np.sqrt((error**2).mean(0)), 3)}, median sigma {np.round(np.median(sigma, 0), 3)}, "
            f"truth std {np.round(truth.std(0), 3)}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
