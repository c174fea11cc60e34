"""Simulator throughput: simulated seconds per wall second, in-process, 1 worker and all workers.

Run: ``.venv/bin/python benchmarks/bench_sim.py [--preset nano] [--flights 4] [--seconds 30]``.

Rows:

* ``flight (in-process)`` — one :func:`simulate_flight` call, no process start-up: the per-step cost;
* ``simulate_many, 1 worker`` — the same flights serially, CSV writing included;
* ``simulate_many, N workers`` — ``spawn`` workers over every core (start-up included: each worker
  imports rotorpy, which imports torch).

The last line extrapolates the ``all workers`` rate to the suite's main job (24 nano flights × 60 s).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from velobins_data.sim import get_preset, simulate_flight, simulate_many

MAIN_JOB_FLIGHTS = 24
MAIN_JOB_SECONDS = 60.0


def _row(label: str, flights: int, seconds: float, wall: float, rate_hz: float) -> str:
    simulated = flights * seconds
    steps = simulated * rate_hz
    per_step = 1e6 * wall / steps
    return f"{label:<28} {flights:>7d} {simulated:>9.0f} {wall:>8.2f} {simulated / wall:>12.1f} {per_step:>9.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="nano")
    parser.add_argument("--flights", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    preset = get_preset(args.preset)
    cores = os.cpu_count() or 1

    print(f"preset {preset.name}: {preset.rate_hz:.0f} Hz control/IMU, RK4 x{preset.substeps}; {cores} cores")
    print(f"{'run':<28} {'flights':>7} {'sim [s]':>9} {'wall [s]':>8} {'sim s/wall s':>12} {'us/step':>9}")

    start = time.perf_counter()
    simulate_flight(preset, "figure8", args.seconds, args.seed)
    print(_row("flight (in-process)", 1, args.seconds, time.perf_counter() - start, preset.rate_hz))

    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in sorted({1, cores}):
            start = time.perf_counter()
            simulate_many(
                preset, args.flights, args.seconds, args.seed, Path(tmp) / str(workers), workers, progress=False
            )
            wall = time.perf_counter() - start
            rates[workers] = args.flights * args.seconds / wall
            label = f"simulate_many, {workers} worker{'s' if workers > 1 else ''}"
            print(_row(label, args.flights, args.seconds, wall, preset.rate_hz))

    if len(rates) > 1:
        print(f"speed-up {cores} workers vs 1: {rates[cores] / rates[1]:.2f}x")
    estimate = MAIN_JOB_FLIGHTS * MAIN_JOB_SECONDS / rates[cores]
    print(
        f"estimated main job ({MAIN_JOB_FLIGHTS} flights x {MAIN_JOB_SECONDS:.0f} s, {cores} workers): "
        f"{estimate:.0f} s wall (start-up amortised better over longer runs)"
    )


if __name__ == "__main__":
    main()
