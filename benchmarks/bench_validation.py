"""What the plausibility checks cost against the work they guard (issue 13: at most 2 %).

Every flight that `velobins train` / `evaluate` / `convert` loads passes
:func:`velobins_data.validate.check_flight` once, at load. This prints, per flight, the time of
the adapter's load, of the checks, of scoring the flight (network + EKF, as `evaluate` does)
and the checks' share of (a) `evaluate` (load + checks + scoring) and (b) `train` (load + checks
+ one epoch at stride 1, estimated from timed optimizer steps of the default model).

    python benchmarks/bench_validation.py [--dataset nanobench --data ../shared/data/nanobench/val]

Without --data it simulates 4 nano flights of 30 s into a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from benchstats import cpu_name, quartiles

from velobins_data.datasets import flight_files, load_flight
from velobins_data.sim.batch import simulate_many
from velobins_data.validate import check_flight
from velobins_eval.evaluate import fuse_flight, predict_flight
from velobins_net.config import ModelConfig
from velobins_net.model import VeloBinsNet


def timed(fn, *args, **kw) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def epoch_seconds(flights, rounds: int = 12) -> float:
    """One training epoch at stride 1 and batch 128 of the default G+H model, from timed steps."""
    from velobins_net.bins import BinGrid
    from velobins_net.data import WindowDataset
    from velobins_net.losses import variant_loss
    from velobins_net.train import make_optimizer
    from velobins_net.variants import parse_variant

    cfg = ModelConfig(num_rotors=flights[0].num_rotors, rotor_kind=flights[0].rotor_kind, velocity_range=3.0)
    model = VeloBinsNet(cfg).train()
    opt = make_optimizer(model.parameters(), 3e-4)
    variant = parse_variant("G+H^B")
    grid = BinGrid(cfg.num_bins, cfg.velocity_range)
    ds = WindowDataset(flights, cfg, stride=1)
    x, y = ds.gather(torch.arange(min(128, len(ds))))
    steps = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = model(x)
        loss, _ = variant_loss(variant, out, y, grid, model.bins.centres, use_nll=False)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps.append(time.perf_counter() - t0)
    return statistics.median(steps[2:]) * len(ds) / len(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csv")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--rounds", type=int, default=5, help="timed loads and checks per flight")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp) / "sim"
            simulate_many("nano", 4, 30.0, 0, data, workers=1, progress=False)
        files = flight_files(args.dataset, data)
        load_s, check_s, flights = [], [], []
        for path in files:
            loads = [timed(load_flight, args.dataset, path, validate=False) for _ in range(args.rounds)]
            flight = loads[-1][1]
            checks = [timed(check_flight, flight)[0] for _ in range(args.rounds)]
            load_s.append(statistics.median(t for t, _ in loads))
            check_s.append(statistics.median(checks))
            flights.append(flight)
    cfg = ModelConfig(num_rotors=flights[0].num_rotors, rotor_kind=flights[0].rotor_kind, velocity_range=3.0)
    model = VeloBinsNet(cfg).eval()
    score_s = []
    for flight in flights[:3]:
        t0 = time.perf_counter()
        t, v, var = predict_flight(model, flight)
        fuse_flight(flight, t, v, var, "bench")
        score_s.append((time.perf_counter() - t0) / max(flight.duration, 1e-9))
    per_flight_score = [statistics.median(score_s) * s.duration for s in flights]
    epoch = epoch_seconds(flights)
    share_eval = [c / (lo + c + sc) for c, lo, sc in zip(check_s, load_s, per_flight_score, strict=True)]
    share_train = sum(check_s) / (sum(load_s) + sum(check_s) + epoch)
    q = quartiles(share_eval) if len(share_eval) > 1 else (share_eval[0],) * 3
    print(f"CPU: {cpu_name()}; {len(flights)} flights of {args.dataset} ({sum(s.duration for s in flights):.0f} s)")
    print(f"adapter load      {1e3 * statistics.median(load_s):8.2f} ms per flight (median)")
    print(f"plausibility      {1e3 * statistics.median(check_s):8.2f} ms per flight (median)")
    print(f"scoring (net+EKF) {statistics.median(per_flight_score):8.2f} s per flight (median)")
    print(f"training epoch    {epoch:8.1f} s (stride 1, batch 128, default model, estimated from timed steps)")
    print(f"checks' share of evaluate: {100 * q[1]:.3f} % (per-flight IQR {100 * q[0]:.3f}-{100 * q[2]:.3f} %)")
    print(f"checks' share of train (load + one epoch): {100 * share_train:.4f} %")


if __name__ == "__main__":
    main()
