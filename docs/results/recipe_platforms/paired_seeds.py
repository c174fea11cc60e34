"""Items 24 and 25 of README.md: the floor against regression seed by seed, with the paired differences'
t-intervals.

For seeds S, reads ``<study>/<prefix>_reg_paper[_sS]/<evaluation>/metrics.json`` and the same for
``gh_valfloor`` (or any two arms, ``--arms A B``: B against A), prints network AVE / fused AVE / NEES share per
seed and their means, and for each figure the paired difference floor − regression: mean, standard deviation,
95 % t-interval, and in how many seeds the floor is ahead (lower AVE, higher NEES share). Usage:

    python paired_seeds.py runs/recipe28 n16_5min eval_nb9 0 1 2 3 4 5
    python paired_seeds.py --arms gh_valfloor gh_shapefloor runs/recipe28 n16_5min eval_nb9 0 1 2 3 4 5
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


def paired_report(
    study: Path, prefix: str, evaluation: str, seeds: list[int], arms: tuple[str, str] = ("reg_paper", "gh_valfloor")
) -> None:
    """Per seed and on the mean: arm B ("floor") against arm A ("regression"), the default pair of item 24."""
    pairs = []
    for seed in seeds:
        reg = seed_figures(study, prefix, arms[0], seed, evaluation)
        floor = seed_figures(study, prefix, arms[1], seed, evaluation)
        if reg is None or floor is None:
            print(f"seed {seed}: not evaluated")
            continue
        pairs.append((reg, floor))
        reg_text, floor_text = (f"{x[0]:.3f} / {x[1]:.3f} / {x[2]:.1%}" for x in (reg, floor))
        print(f"seed {seed}: {arms[0]} {reg_text}, {arms[1]} {floor_text}")
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
            f"{name}: {arms[0]} {reg_mean:.4f}, {arms[1]} {floor_mean:.4f}; {arms[1]} − {arms[0]} {mean:+.4f} "
            f"(sd {sd:.4f}, 95 % {mean - half:+.4f} to {mean + half:+.4f}, {mean / reg_mean:+.1%}); "
            f"{arms[1]} ahead in {ahead} of {n}"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    pair = ("reg_paper", "gh_valfloor")
    if args[:1] == ["--arms"] and len(args) >= 3:
        pair, args = (args[1], args[2]), args[3:]
    if len(args) < 4:
        sys.exit(__doc__)
    paired_report(Path(args[0]), args[1], args[2], [int(s) for s in args[3:]], pair)
