"""Item 40 of README.md: the built stage's axis factors with each one kept at 1 where it lies within Z of its
by-flight uncertainty of 1, replayed offline on NanoBench val (``axis_scale_probe.score``) beside 1 and the fit.

For each ``STUDY/flow/NAME`` whose ``NAME_axes`` flow ran the factor stage (``flow.sh … axis_variance_factors
START``), reads the three factors and their "by flight" factor of uncertainty from ``NAME_axes/flow.log``, sets to 1
every factor with |log10 k| ≤ Z · log10(its uncertainty), and replays the saved estimates of ``NAME/eval_val``
(factors 1) with 1, the fitted factors and the kept ones. Usage:

    python axis_shrink.py Z STUDY/flow NAME...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from axis_fit_flow import FILES  # this folder: flow.sh's --params
from axis_scale_probe import _fail, flights_in, saved_updates, score  # this folder: loading, the per-axis replay
from variance_map_probe import VAL  # this folder: the test flights

from velobins_eval.evaluate import load_ekf_config


def factors_and_spread(log: str) -> tuple[np.ndarray, np.ndarray]:
    """(the three fitted factors, log10 of their by-flight uncertainty factors) from a calibrate log."""
    k, spread = [], []
    for axis in "xyz":
        m = re.search(rf"axis_variance_factors\.{axis} ([0-9.e+-]+):.*×/÷ ([0-9.]+) \(by flight\)", log)
        if m is None:
            raise ValueError(f"no by-flight uncertainty of axis {axis} in the log")
        k.append(float(m.group(1)))
        spread.append(np.log10(float(m.group(2))))
    return np.array(k), np.array(spread)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    z, flows = float(sys.argv[1]), Path(sys.argv[2])
    val = flights_in(VAL, "nanobench")
    rows = []
    for name in sys.argv[3:]:
        try:
            k, spread = factors_and_spread((flows / f"{name}_axes" / "flow.log").read_text())
            config = load_ekf_config([*FILES, flows / name / "overlay.yaml"])
        except (ValueError, OSError) as exc:
            sys.exit(_fail(f"{name}: {exc}"))
        kept = np.where(np.abs(np.log10(k)) > z * spread, k, 1.0)
        on_val = saved_updates(flows / name / "eval_val", val)
        figures = [score(val, on_val, f, config) for f in (np.ones(3), k, kept)]
        rows.append(figures)
        cells = "  ".join(
            f"{label} {f[0]:.3f} / {f[2]:.1%}" for label, f in zip(("1", "k", "kept"), figures, strict=True)
        )
        print(f"{name}: k {np.round(k, 2)} -> {np.round(kept, 2)}; val fused AVE / in bounds: {cells}", flush=True)
    mean = np.mean([[f[0] for f in r] for r in rows], axis=0)
    share = np.mean([[f[2] for f in r] for r in rows], axis=0)
    print(
        f"mean over {len(rows)}: fused AVE {mean[0]:.4f} / {mean[1]:.4f} / {mean[2]:.4f}; in bounds "
        f"{share[0]:.1%} / {share[1]:.1%} / {share[2]:.1%} (1 / k / kept)"
    )
