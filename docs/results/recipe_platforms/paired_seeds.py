"""Item 24 of README.md: the floor against regression seed by seed, with the paired difference's t-interval.

For seeds S, reads ``<study>/<prefix>_reg_paper[_sS]/<evaluation>/metrics.json`` and the same for
``gh_valfloor``, prints network AVE / fused AVE / NEES share per seed and their means, and for each figure the
paired difference floor − regression: mean, standard deviation, 95 % t-interval, and in how many seeds the floor
is ahead (lower AVE, higher NEES share). Usage:

    python paired_seeds.py runs/recipe28 n16_5min eval_nb9 0 1 2 3 4 5
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from scipy import stats

FIGURES = (("network AVE", "net_ave", False), ("fused AVE", "ave", False), ("NEES in 95 %", "nees_in_bounds", True))
"""(name, ``metrics.json`` aggregate key, higher is better)."""


def seed_figures(study: Path, prefix: str, arm: str, seed: int, evaluation: str) -> list[float] | None:
    """The figures of one run's evaluation, or None where it has not run."""
    name = f"{prefix}_{arm}" + (f"_s{seed}" if seed else "")
    metrics = study / name / evaluation / "metrics.json"
    if not metrics.exists():
        return None
    aggregate = next(iter(json.loads(metrics.read_text()).values()))["aggregate"]
    return [float(aggregate[key]) for _, key, _ in FIGURES]


def paired_report(study: Path, prefix: str, evaluation: str, seeds: list[int]) -> None:
    pairs = []
    for seed in seeds:
        reg = seed_figures(study, prefix, "reg_paper", seed, evaluation)
        floor = seed_figures(study, prefix, "gh_valfloor", seed, evaluation)
        if reg is None or floor is None:
            print(f"seed {seed}: not evaluated")
            continue
        pairs.append((reg, floor))
        reg_text, floor_text = (f"{x[0]:.3f} / {x[1]:.3f} / {x[2]:.1%}" for x in (reg, floor))
        print(f"seed {seed}: regression {reg_text}, floor {floor_text}")
    n = len(pairs)
    if n < 2:
        return
    for i, (name, _, higher) in enumerate(FIGURES):
        reg_mean = sum(r[i] for r, _ in pairs) / n
        floor_mean = sum(f[i] for _, f in pairs) / n
        diff = [f[i] - r[i] for r, f in pairs]
        mean = sum(diff) / n
        sd = math.sqrt(sum((d - mean) ** 2 for d in diff) / (n - 1))
        half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
        ahead = sum((d > 0) if higher else (d < 0) for d in diff)
        print(
            f"{name}: regression {reg_mean:.4f}, floor {floor_mean:.4f}; floor − regression {mean:+.4f} "
            f"(sd {sd:.4f}, 95 % {mean - half:+.4f} to {mean + half:+.4f}, {mean / reg_mean:+.1%}); "
            f"floor ahead in {ahead} of {n}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    paired_report(Path(sys.argv[1]), sys.argv[2], sys.argv[3], [int(s) for s in sys.argv[4:]])
