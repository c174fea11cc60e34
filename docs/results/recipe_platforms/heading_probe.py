"""Item 30 of README.md: is a filter's over-confidence on a flight its velocity or its heading?

For each evaluation folder (``velobins evaluate --out``) and method, per flight: the share of updates whose fused
NEES is inside the 95 % bounds, as ``velobins evaluate`` counts it, and the same share with the attitude's part
of the error taken out. That part is what a wrong attitude alone would put on the world velocity: the true body
velocity rotated by the filter's attitude, against the truth. What is left is the velocity error proper; if the
share rises to near 95 % without the attitude's part, the covariance is right about the velocity and wrong about
the heading. Also prints the heading error (:func:`velobins_eval.metrics.yaw_errors`) at seven equal steps
through ``--flight`` (default: the fast trefoil of NanoBench val), for ``imu-only`` too where the folder has it
(evaluated without ``--no-imu-only``): the same filter without updates, so the gyro integrated from the true
start attitude. Usage:

    python heading_probe.py [--flight NAME] EVAL_DIR...
    python heading_probe.py runs/heldout runs/recipe29/flow/reg_10min_s0/eval_val
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial.transform import Rotation

from velobins_common.stats import NEES_BOUNDS
from velobins_eval.metrics import yaw_errors

LOW, HIGH = NEES_BOUNDS
"""The χ²(3) 95 % bounds ``velobins evaluate`` counts inside."""
STEPS = 7
"""Heading errors printed per flight: at the start, five equal steps, and the end."""


def heading(q_est: np.ndarray, q_true: np.ndarray) -> np.ndarray:
    """Heading error [deg] per row (:func:`velobins_eval.metrics.yaw_errors`)."""
    return np.degrees(yaw_errors(q_est, q_true))


def attitudes(u: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(estimated, true) attitude quaternions, x y z w, of one flight's ``updates.csv``."""
    return u[["qx", "qy", "qz", "qw"]].to_numpy(), u[["gt_qx", "gt_qy", "gt_qz", "gt_qw"]].to_numpy()


def shares(u: pd.DataFrame) -> tuple[float, float]:
    """(share in bounds, share in bounds without the attitude's part) of one flight's ``updates.csv``."""
    v = u[["vx", "vy", "vz"]].to_numpy()
    truth = u[["gt_vx", "gt_vy", "gt_vz"]].to_numpy()
    cov = u[[c for c in u.columns if c.startswith("v_cov_")]].to_numpy().reshape(-1, 3, 3)
    q_est, q_true = attitudes(u)
    body = Rotation.from_quat(q_true).inv().apply(truth)
    error = v - Rotation.from_quat(q_est).apply(body)  # the velocity error with a right attitude
    nees = np.einsum("ni,nij,nj->n", error, np.linalg.inv(cov), error)
    inside = (u["nees"] >= LOW) & (u["nees"] <= HIGH)
    return float(inside.mean()), float(((nees >= LOW) & (nees <= HIGH)).mean())


def picks(values: np.ndarray) -> np.ndarray:
    """:data:`STEPS` values at equal steps through ``values``, the last one included."""
    return values[np.linspace(0, len(values) - 1, STEPS).round().astype(int)]


def main(args: list[str]) -> None:
    flight = "B9_trefoil_fast_rep14"
    if len(args) >= 2 and args[0] == "--flight":
        flight, args = args[1], args[2:]
    if not args or args[0].startswith("--"):
        sys.exit(__doc__)
    for folder in map(Path, args):
        tables = sorted(folder.glob("estimates/*/*/updates.csv"))
        if not tables:
            sys.exit(f"heading_probe: no estimates/*/*/updates.csv under {folder}")
        for method in sorted({t.parent.name for t in tables}):
            mine = {t.parts[-3]: pd.read_csv(t) for t in tables if t.parent.name == method}
            if method != "imu-only":  # imu-only has no updates, so no covariance to count against
                rows = [(name, *shares(u)) for name, u in mine.items()]
                raw, kept = np.mean([r[1] for r in rows]), np.mean([r[2] for r in rows])
                print(f"{folder} {method}: in bounds {100 * raw:.1f} %, without the attitude's part {100 * kept:.1f} %")
                print("    " + "; ".join(f"{n} {100 * a:.1f} / {100 * b:.1f}" for n, a, b in rows))
            if flight in mine:
                errors = heading(*attitudes(mine[flight]))
                print(f"{folder} {method}: heading error on {flight}: " + " ".join(f"{x:.0f}" for x in picks(errors)))


if __name__ == "__main__":
    main(sys.argv[1:])
