"""Items 13 and 14 of README.md: split the runs' fused AVE into its body-frame part and the attitude error.

For each run folder, reads the evaluation with the s calibrated on the run's held-out flight (``rpm``:
``eval_cal_allan``, item 11's filter; ``n8``: ``eval_cal``, the bench's) and, where present,
``eval_s_x<factor>/metrics.json`` (``scale_sweep_rpm.sh``: that s times a factor). Prints, per budget and arm,
one row per seed at the calibrated s and the means over seeds at every factor: fused AVE (world frame) / fused
AVE in the body frame / attitude-error RMS [°] / NEES share in the 95 % bounds / posterior NLL per update
(calibrate's objective, the log score of the fused velocity against the truth, from each evaluation's
``estimates/*/*/updates.csv``).

Usage: python heading_split.py STUDY_DIR [PLATFORM [BUDGET ...]]   (e.g. runs/recipe28 rpm 5min 10min)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from velobins_common.stats import gaussian_nll_samples

ARMS = ("reg_paper", "gh_valfloor")
SEEDS = ("", "_s1", "_s2", "_s3", "_s4")
FACTORS = ("0.5", "1", "2", "4")
CALIBRATED = {"rpm": "eval_cal_allan", "n8": "eval_cal"}
"""Per platform, the evaluation folder of a run with its calibrated s (``n8``: the bench's; ``rpm``: item 11's)."""
FIELDS = ("ave", "ave_body", "rot_rms", "nees_in_bounds", "posterior_nll")
AXES = ("x", "y", "z")


def posterior_nll(evaluation: Path) -> float:
    """Mean over flights of the mean ½(eᵀP⁻¹e + log det P + 3 log 2π) over updates, e the fused world velocity's
    error: ``velobins evaluate``'s ``fused_nll`` aggregate, for evaluations made before it had that column."""
    terms = []
    for path in sorted(evaluation.glob("estimates/*/*/updates.csv")):
        u = pd.read_csv(path)
        err = u[[f"v{a}" for a in AXES]].to_numpy() - u[[f"gt_v{a}" for a in AXES]].to_numpy()
        cov = u[[f"v_cov_{a}{b}" for a in AXES for b in AXES]].to_numpy().reshape(-1, 3, 3)
        terms.append(gaussian_nll_samples(err, cov).mean())
    return float(np.mean(terms))


def aggregate(evaluation: Path) -> dict[str, float] | None:
    """The one method's aggregate figures of an evaluation folder, or None if it is absent."""
    path = evaluation / "metrics.json"
    if not path.is_file():
        return None
    (method,) = json.loads(path.read_text()).values()
    figures = {k: float(method["aggregate"][k]) for k in FIELDS[:-1]}
    return figures | {"posterior_nll": posterior_nll(evaluation)}


def cell(a: dict[str, float]) -> str:
    return (
        f"{a['ave']:.3f} / {a['ave_body']:.3f} / {a['rot_rms']:.1f}° / {100 * a['nees_in_bounds']:.1f} % / "
        f"{a['posterior_nll']:.3f}"
    )


def main(study: Path, platform: str, budgets: list[str]) -> None:
    print("| budget | arm | seed | s × | fused AVE / body-frame AVE / attitude RMS / NEES in 95 % / posterior NLL |")
    print("|---|---|---|---|---|")
    for budget in budgets:
        for arm in ARMS:
            by_factor: dict[str, list[dict[str, float]]] = {f: [] for f in FACTORS}
            for seed in SEEDS:
                run = study / f"{platform}_{budget}_{arm}{seed}"
                rows = {f: aggregate(run / (CALIBRATED[platform] if f == "1" else f"eval_s_x{f}")) for f in FACTORS}
                if rows["1"] is None:
                    continue
                print(f"| {budget} | `{arm}` | {seed.lstrip('_s') or '0'} | 1 | {cell(rows['1'])} |")
                for f, a in rows.items():
                    if a is not None:
                        by_factor[f].append(a)
            for f, runs in by_factor.items():
                if runs:
                    mean = {k: statistics.mean(r[k] for r in runs) for k in FIELDS}
                    print(f"| {budget} | `{arm}` | **mean of {len(runs)}** | {f} | {cell(mean)} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "rpm", sys.argv[3:] or ["5min", "10min"])
