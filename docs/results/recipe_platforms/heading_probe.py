"""Item 30 of README.md: is a filter's over-confidence on a flight its velocity or its heading?

For each evaluation folder (``velobins evaluate --out``) and method, per flight: the share of updates whose fused
NEES is inside the 95 % bounds, as ``velobins evaluate`` counts it, and the same share with the attitude's part
of the error taken out. That part is what a wrong attitude alone would put on the world velocity: the true body
velocity rotated by the filter's attitude, against the truth. What is left is the velocity error proper; if the
share rises to near 95 % without the attitude's part, the covariance is right about the velocity and wrong about
the heading. Also prints the heading error at seven equal steps through ``--flight`` (default: the fast trefoil
of NanoBench val), and, with ``--gyro DATA``, how far the raw gyro alone drifts in heading over the same flight
(integrated from the true start attitude, no filter). Usage:

    python heading_probe.py [--flight NAME] [--gyro DATA_DIR] EVAL_DIR...
    python heading_probe.py --gyro ../shared/data/nanobench/val runs/recipe29/flow/reg_10min_s0/eval_val
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial.transform import Rotation

from velobins_common.stats import NEES_BOUNDS

LOW, HIGH = NEES_BOUNDS
"""The χ²(3) 95 % bounds ``velobins evaluate`` counts inside."""
STEPS = 7
"""Heading errors printed per flight: at the start, five equal steps, and the end."""


def heading_errors(q_est: np.ndarray, q_true: np.ndarray) -> np.ndarray:
    """Heading (yaw) of the estimated attitude relative to the true one [deg], per row."""
    return (Rotation.from_quat(q_est) * Rotation.from_quat(q_true).inv()).as_euler("zyx")[:, 0] * 180.0 / np.pi


def shares(u: pd.DataFrame) -> tuple[float, float, np.ndarray]:
    """(share in bounds, share in bounds without the attitude's part, heading error [deg]) of one flight's
    ``updates.csv``."""
    v = u[["vx", "vy", "vz"]].to_numpy()
    truth = u[["gt_vx", "gt_vy", "gt_vz"]].to_numpy()
    cov = u[[c for c in u.columns if c.startswith("v_cov_")]].to_numpy().reshape(-1, 3, 3)
    q_est, q_true = u[["qx", "qy", "qz", "qw"]].to_numpy(), u[["gt_qx", "gt_qy", "gt_qz", "gt_qw"]].to_numpy()
    body = Rotation.from_quat(q_true).inv().apply(truth)
    error = v - Rotation.from_quat(q_est).apply(body)  # the velocity error with a right attitude
    nees = np.einsum("ni,nij,nj->n", error, np.linalg.inv(cov), error)
    inside = (u["nees"] >= LOW) & (u["nees"] <= HIGH)
    return float(inside.mean()), float(((nees >= LOW) & (nees <= HIGH)).mean()), heading_errors(q_est, q_true)


def gyro_drift(data: Path, flight: str) -> np.ndarray:
    """Heading error [deg] of the raw gyro integrated from the true start attitude, at :data:`STEPS` points."""
    from velobins_data.datasets import load_flights

    seq = next((s for s in load_flights("nanobench", data).sequences if s.name == flight), None)
    if seq is None:
        sys.exit(f"heading_probe: {data}: no flight {flight}")
    truth = Rotation.from_quat(seq.q)
    steps = Rotation.from_rotvec(0.5 * (seq.gyro[:-1] + seq.gyro[1:]) * np.diff(seq.t)[:, None])
    attitude = [truth[0]]
    for step in steps:
        attitude.append(attitude[-1] * step)
    quats = np.array([r.as_quat() for r in attitude])
    return picks(heading_errors(quats, seq.q))


def picks(values: np.ndarray) -> np.ndarray:
    """:data:`STEPS` values at equal steps through ``values``, the last one included."""
    return values[np.linspace(0, len(values) - 1, STEPS).round().astype(int)]


def main(args: list[str]) -> None:
    flight, data = "B9_trefoil_fast_rep14", None
    while args and args[0].startswith("--"):
        option, value = args.pop(0), args.pop(0)
        if option == "--flight":
            flight = value
        elif option == "--gyro":
            data = Path(value)
        else:
            sys.exit(__doc__)
    if not args:
        sys.exit(__doc__)
    if data is not None:
        print(f"raw gyro alone on {flight}: heading error " + " ".join(f"{x:.0f}" for x in gyro_drift(data, flight)))
    for folder in map(Path, args):
        tables = sorted(folder.glob("estimates/*/*/updates.csv"))
        if not tables:
            sys.exit(f"heading_probe: no estimates/*/*/updates.csv under {folder}")
        for method in sorted({t.parent.name for t in tables} - {"imu-only"}):  # no updates: nothing inside
            rows = [(t.parts[-3], *shares(pd.read_csv(t))) for t in tables if t.parent.name == method]
            raw, kept = np.mean([r[1] for r in rows]), np.mean([r[2] for r in rows])
            per = "; ".join(f"{n} {100 * a:.1f} / {100 * b:.1f}" for n, a, b, _ in rows)
            print(f"{folder} {method}: in bounds {100 * raw:.1f} %, without the attitude's part {100 * kept:.1f} %")
            print(f"    {per}")
            heading = next((h for n, _, _, h in rows if n == flight), None)
            if heading is not None:
                print(f"    heading error on {flight}: " + " ".join(f"{x:.0f}" for x in picks(heading)))


if __name__ == "__main__":
    main(sys.argv[1:])
