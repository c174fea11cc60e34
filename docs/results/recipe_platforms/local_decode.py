"""Does probability mass far from the mode pull G+H^B's decoded mean toward 0? (recipe study item 9, issue 28)

Runs a checkpoint over NanoBench flights as the node does (``StreamingPredictor``, bin distributions kept) and
prints, per body axis, the slope of the estimate against the body-frame truth and its RMS error for the paper's
expectation (eq:decode), for the expectation restricted to ±W m/s around the mode, and for the mode alone, with
the mass each window leaves out. Usage:

    python docs/results/recipe_platforms/local_decode.py runs/recipe28/n8_5min_gh_valfloor/best.pt \\
        ../shared/data/nanobench/val 0.25 0.5 1.0
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from velobins_common.errors import UserError
from velobins_data.datasets import load_flights
from velobins_eval.scoring import GroundTruth
from velobins_net.inference import StreamingPredictor, load_checkpoint


def distributions(model, flights) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """(body truth (U, 3), the node's estimates (U, 3), bin probabilities (U, 3, N)) over every flight."""
    truth, plain, probs = [], [], []
    for f in flights:
        predictor = StreamingPredictor(model, return_probs=True)
        stamps = []
        for i in range(len(f)):
            predictor.push_rotor(float(f.t[i]), f.rotor[i])
            predictor.push_imu(float(f.t[i]), f.acc[i], f.gyro[i])
            out = predictor.step()
            if out is not None:
                stamps.append(out.stamp)
                plain.append(out.velocity)
                probs.append(out.probs)
        truth.append(GroundTruth.of(f).at(np.array(stamps)).body_velocity)
    return np.concatenate(truth), np.array(plain), torch.from_numpy(np.array(probs)).double()


def slope_and_rms(truth: np.ndarray, est: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per axis: least-squares slope of ``est`` on ``truth`` and the RMS of ``est − truth``."""
    d = truth - truth.mean(0)
    slope = (d * (est - est.mean(0))).sum(0) / (d * d).sum(0)
    return slope, np.sqrt(((est - truth) ** 2).mean(0))


def binned_model(checkpoint: str, data: str, prog: str) -> tuple[torch.nn.Module, list, torch.Tensor] | None:
    """(model, the NanoBench flights in ``data``, its bin centres in float64) for a checkpoint with velocity bins;
    None after one line on standard error, prefixed ``prog``, naming what is wrong (the caller exits 2)."""
    try:
        model = load_checkpoint(checkpoint)
        flights = load_flights("nanobench", data).sequences
    except (UserError, OSError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    decoder = next((m for m in model.modules() if hasattr(m, "centres")), None)
    if decoder is None:
        print(f"{prog}: {checkpoint} has no velocity bins (a regression model?)", file=sys.stderr)
        return None
    return model, flights, decoder.centres.double()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        windows = [float(w) for w in argv[2:]] or [0.25, 0.5, 1.0]
    except ValueError as exc:
        print(f"local_decode: a window must be a number of m/s ({exc})", file=sys.stderr)
        return 2
    loaded = binned_model(argv[0], argv[1], "local_decode")
    if loaded is None:
        return 2
    model, flights, centres = loaded
    truth, plain, probs = distributions(model, flights)
    mean = (probs @ centres).numpy()
    print(f"{len(truth)} estimates; the expectation matches the node's: {np.allclose(mean, plain, atol=1e-4)}")
    rows = [("expectation", mean, None)]
    mode = centres[probs.argmax(-1)]
    for w in windows:
        inside = (centres.view(1, 1, -1) - mode.unsqueeze(-1)).abs() <= w
        kept = probs * inside
        rows.append((f"±{w:g} m/s of the mode", ((kept @ centres) / kept.sum(-1)).numpy(), (probs * ~inside).sum(-1)))
    rows.append(("mode", mode.numpy(), None))
    for label, est, outside in rows:
        slope, rms = slope_and_rms(truth, est)
        extra = "" if outside is None else f", mass left out {np.round(outside.mean(0).numpy(), 3)}"
        print(f"{label}: slope {np.round(slope, 3)}, RMS {np.round(rms, 3)}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
