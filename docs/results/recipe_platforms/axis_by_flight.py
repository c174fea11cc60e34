"""Item 41 of README.md: is a per-axis variance factor a property of the network, or of the flights' headings?

For each flight of one or more ``velobins evaluate`` folders (their saved ``updates.csv``: the network's body-frame
estimate ``net_v*``, its variance ``net_var*`` as the filter used it, ground truth ``gt_v*`` in the world frame and
``gt_q*``), prints per body axis:

* the RMS of the true body-frame velocity (how the flight's motion is shared between the axes: with a heading that
  does not follow the path, the same figure-8 puts its long axis along body x in one flight and body y in another);
* the RMS of the network's error;
* the network's own best variance scale on that axis, mean(e²/var): what a factor on the axis would be if the
  network's errors were white (``calibrate``'s "its own errors' best s" line, per flight).

Then, over all flights given, per axis, the rank correlation between a flight's own scale on the axis and its
motion along it (does the network's variance miss how its error grows with speed on that axis?), and between the
flights' y/x balance of own scales and of motion (is the x/y balance the flights' headings?). Usage:

    python axis_by_flight.py runs/recipe41/flow/nano_pair01/eval_cal29_unit runs/recipe41/flow/nano_pair01/eval_unit
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from axis_scale_probe import ESTIMATE_COLUMNS, VAR_COLUMNS, _fail  # this folder: the saved columns, exit 2
from scipy.stats import spearmanr

from velobins_eval.metrics import GroundTruthAt

AXES = "xyz"


def flight_updates(evaluation: Path) -> dict[str, pd.DataFrame]:
    """Each flight's saved updates of an evaluation folder (the first method's), by flight name; exits 2 with one
    line naming the folder when it holds none."""
    found = sorted(evaluation.glob("estimates/*/*/updates.csv"))
    if not found:
        sys.exit(_fail(f"no {evaluation}/estimates/*/*/updates.csv (run velobins evaluate first)"))
    return {path.parent.parent.name: pd.read_csv(path) for path in found}


def body_truth(u: pd.DataFrame) -> np.ndarray:
    """(N, 3) true velocity in the body frame, from the saved world-frame ground truth ``gt_*`` (``velobins
    evaluate``'s own :attr:`GroundTruthAt.body_velocity`)."""

    def saved(prefix: str, axes: str = "xyz") -> np.ndarray:
        return u[[f"{prefix}{a}" for a in axes]].to_numpy()

    return GroundTruthAt(u.t.to_numpy(), saved("gt_p"), saved("gt_q", "xyzw"), saved("gt_v")).body_velocity


def axis_figures(u: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per body axis (3,): RMS true velocity ``motion``, RMS network error ``error``, own scale mean(e²/var)."""
    truth = body_truth(u)
    err = u[ESTIMATE_COLUMNS].to_numpy() - truth
    var = u[VAR_COLUMNS].to_numpy()
    return {
        "motion": np.sqrt(np.mean(truth**2, axis=0)),
        "error": np.sqrt(np.mean(err**2, axis=0)),
        "own": np.mean(err**2 / var, axis=0),
    }


def main(folders: list[str]) -> int:
    loaded = [(Path(folder).name, flight_updates(Path(folder))) for folder in folders]  # every folder, or one line
    rows = []
    header = "flight | motion x/y/z [m/s] | error x/y/z [m/s] | own scale x/y/z | own y/x | motion y/x"
    print(header)
    print("|".join("---" for _ in header.split("|")))
    for folder, updates in loaded:
        for name, u in updates.items():
            f = axis_figures(u)
            own_ratio, motion_ratio = f["own"][1] / f["own"][0], f["motion"][1] / f["motion"][0]
            rows.append((f["own"], f["motion"], own_ratio, motion_ratio))
            print(
                f"{folder}/{name} | "
                + " ".join(f"{v:.3f}" for v in f["motion"])
                + " | "
                + " ".join(f"{v:.3f}" for v in f["error"])
                + " | "
                + " ".join(f"{v:.3g}" for v in f["own"])
                + f" | {own_ratio:.2f} | {motion_ratio:.2f}"
            )
    if len(rows) >= 3:
        own, motion = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        for i, axis in enumerate(AXES):
            rho, p = spearmanr(own[:, i], motion[:, i])
            print(f"rank correlation, own scale {axis} with motion {axis}, {len(rows)} flights: {rho:+.2f} (p {p:.3f})")
        rho, p = spearmanr([r[2] for r in rows], [r[3] for r in rows])
        print(f"rank correlation of own y/x with motion y/x over {len(rows)} flights: {rho:+.2f} (p {p:.3f})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    raise SystemExit(main(sys.argv[1:]))
