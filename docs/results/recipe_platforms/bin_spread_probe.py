"""Item 26 of README.md: does any feature of G+H^B's bin distributions tell a hard flight from an easy one?

The floor's σ̂ (the bins' standard deviation, eq:decode) is nearly the same on the slow and the fast trefoil
while its errors differ twofold (item 24). This runs a checkpoint over NanoBench flights as the node does
(``StreamingPredictor``, distributions kept; :func:`local_decode.distributions`) and prints, per flight and body
axis, the RMS error and the RMS over windows of several spreads of the same distributions: the standard deviation,
the one a Gaussian of the same entropy would have, |mean − mode|, the one the peak height implies, the interquartile
range and the 5–95 % range (each as a σ of a Gaussian), the standard deviation within ±0.3 m/s of the mode and the
mass outside it; then each feature's Spearman correlation with |error| over all windows. Usage:

    python docs/results/recipe_platforms/bin_spread_probe.py runs/recipe28/n16_5min_gh_valfloor/best.pt \\
        ../shared/data/nanobench/val
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
from local_decode import binned_model, distributions  # this folder: loading, the node's estimates with their bins
from scipy.stats import spearmanr

LOCAL = 0.3
"""Half-width [m/s] around the mode of the local spread and of the tail mass."""


def spread_features(probs: torch.Tensor, centres: torch.Tensor) -> dict[str, np.ndarray]:
    """(U, 3) spreads [m/s] (and the tail mass) of bin distributions ``probs`` (U, 3, N) over ``centres`` (N,)."""
    width = float(centres[1] - centres[0])
    c = centres.view(1, 1, -1)
    mean = probs @ centres
    mode = centres[probs.argmax(-1)]
    cdf = probs.cumsum(-1)

    def quantile(a: float) -> torch.Tensor:
        return centres[(cdf < a).sum(-1).clamp_max(len(centres) - 1)]

    inside = (c - mode.unsqueeze(-1)).abs() <= LOCAL
    kept = probs * inside
    local_mean = (kept @ centres) / kept.sum(-1)
    entropy = -(probs.clamp_min(1e-300) * probs.clamp_min(1e-300).log()).sum(-1)
    features = {
        "std": ((probs * (c - mean.unsqueeze(-1)) ** 2).sum(-1)).sqrt(),
        "entropy σ": entropy.exp() * width / math.sqrt(2 * math.pi * math.e),
        "|mean − mode|": (mean - mode).abs(),
        "peak σ": width / (math.sqrt(2 * math.pi) * probs.max(-1).values),
        "IQR σ": (quantile(0.75) - quantile(0.25)) / 1.349,
        "5–95 % σ": (quantile(0.95) - quantile(0.05)) / 3.29,
        f"std ±{LOCAL:g}": ((kept * (c - local_mean.unsqueeze(-1)) ** 2).sum(-1) / kept.sum(-1)).sqrt(),
        "tail mass": (probs * ~inside).sum(-1),
    }
    return {k: v.numpy() for k, v in features.items()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    loaded = binned_model(argv[0], argv[1], "bin_spread_probe")
    if loaded is None:
        return 2
    model, flights, centres = loaded
    errors, features = [], []
    for f in flights:
        truth, _, probs = distributions(model, [f])
        errors.append((probs @ centres).numpy() - truth)
        features.append(spread_features(probs, centres))
        print(f"{f.name}: RMS error (x, y, z) {np.round(np.sqrt(np.mean(errors[-1] ** 2, axis=0)), 3)}")
        for name, value in features[-1].items():
            print(f"  {name:14s} {np.round(np.sqrt(np.mean(value**2, axis=0)), 4)}")
    err = np.abs(np.concatenate(errors))
    print("Spearman correlation with |error| over all windows (x, y, z):")
    for name in features[0]:
        value = np.concatenate([f[name] for f in features])
        rho = [spearmanr(err[:, a], value[:, a]).statistic for a in range(3)]
        print(f"  {name:14s} {np.round(rho, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
