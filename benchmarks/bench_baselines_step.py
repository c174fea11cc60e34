"""Training-step time and size of the Table I baselines at given widths (what the CPU schedule's widths rest on).

One Adam step (second-phase loss) on a batch of 128 random windows of T = 100 samples, one torch
thread, for each method and each ``baseline_width`` (EqNIO's frame network at ``--frame-width``),
against VeloBins G+H^B in the same run so a reader can compare under the same machine load.
Prints parameters and the median of ``--steps`` timed steps (after one warm-up step).

Run: .venv/bin/python benchmarks/bench_baselines_step.py [--widths 1,0.5] [--frame-width 0.125] [--steps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from velobins_net.bins import BinGrid
from velobins_net.config import BASELINE_METHODS, ModelConfig
from velobins_net.model import count_parameters
from velobins_net.networks import build_model, training_loss
from velobins_net.variants import parse_variant


def step_seconds(cfg: ModelConfig, variant: str, steps: int) -> tuple[int, float]:
    """(parameters, median seconds of one training step) of the model of ``cfg`` trained as ``variant``."""
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = torch.optim.Adam(model.parameters(), 3e-4)
    x = torch.randn(128, cfg.window_len, cfg.input_channels)
    if cfg.attitude_input:
        x[..., cfg.sensor_channels :] = torch.eye(3).reshape(9)  # a valid attitude
    y = 0.5 * torch.randn(128, 3)
    var = parse_variant(variant)
    grid = BinGrid(cfg.num_bins, cfg.velocity_range)
    centres = grid.centres() if cfg.method == "velobins" and cfg.head == "bins" else torch.empty(0)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        loss = training_loss(var, model(x), y, grid, centres, use_nll=True)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    return count_parameters(model), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="1,0.5", help="baseline_width values, comma-separated")
    parser.add_argument("--frame-width", type=float, default=0.125, help="EqNIO frame_width besides 1")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'method':8s} {'width':>6s} {'frame':>6s} {'params':>10s} {'s/step':>8s}")
    params, sec = step_seconds(ModelConfig(), "G+H^B", args.steps)
    print(f"{'G+H^B':8s} {'-':>6s} {'-':>6s} {params:10d} {sec:8.3f}")
    for method in BASELINE_METHODS:
        for w in (float(v) for v in args.widths.split(",")):
            frames = (1.0, args.frame_width) if method == "eqnio" and w < 1.0 else (1.0,)
            for fw in frames:
                cfg = ModelConfig(method=method, head="reg", uncertainty="C", baseline_width=w, frame_width=fw)
                params, sec = step_seconds(cfg, method, args.steps)
                print(f"{method:8s} {w:6.3g} {fw:6.3g} {params:10d} {sec:8.3f}", flush=True)


if __name__ == "__main__":
    main()
