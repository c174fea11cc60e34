"""What an IMU gap hides, and whether the filter's hold says so: the figures behind ``filter.gap_accel_sigma``
and ``filter.gap_rate_sigma``.

Run: ``source scripts/env.sh && python benchmarks/bench_gap_hold.py [--data ../shared/data/nanobench/train]
[--presets nano racer] [--gaps 0.3 0.5 1.0 1.5 3.0]``.

1. **The data** (with ``--data``, any folder ``velobins`` reads; ``--kind`` its dataset kind): over every
   interval of T seconds of every flight, the world velocity's change per axis divided by T (RMS: the
   acceleration σ a hold should assume) and the attitude's rotation angle divided by T (RMS: the rate σ).
2. **The hold** on simulated flights (``velobins_data.sim``, the preset's own noisy IMU, its ground-truth
   body velocity with N(0, 0.05²) noise as the network at 20 Hz): the filter, started from ground truth,
   loses its IMU and measurements for ``gap`` seconds at ten places per flight. Per preset, gap and
   setting the table gives the median NIS of the first update after the gap, the median mean NIS of the
   60 updates after it (the node's ``nis_window``; 3 is consistent), and the share of gaps after which
   that window mean exceeds the node's alarm (``nis_alarm_probability`` 0.001: 4.07). The settings:
   ``initial σ`` (both parameters 0: the hold before they existed), the defaults, and ``agile`` (3 m/s²,
   0.5 rad/s). Paired: every setting sees the same flights and gaps.
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

WINDOW = 60
"""Updates in the node's NIS window (velobins.yaml ``nis_window``)."""
VEL_RATE, NOISE = 20.0, 0.05
"""The simulated network: rate [Hz] and per-axis noise σ [m/s]."""


def data_rates(flights, spans: tuple[float, ...]) -> list[tuple[float, np.ndarray, float]]:
    """Per span T: (T, per-axis RMS of Δv / T [m/s²], RMS of rotation angle / T [rad/s]) over all flights."""
    from scipy.spatial.transform import Rotation

    out = []
    for span in spans:
        acc, rate = [], []
        for f in flights:
            t = f.t - f.t[0]
            j = np.searchsorted(t, t + span)
            i = np.nonzero(j < t.size)[0]
            j = j[i]
            if i.size == 0:
                continue
            acc.append((f.v[j] - f.v[i]) / span)
            q = Rotation.from_quat(f.q)
            rate.append((q[i].inv() * q[j]).magnitude() / span)
        a, w = np.concatenate(acc), np.concatenate(rate)
        out.append((span, np.sqrt((a**2).mean(axis=0)), float(np.sqrt((w**2).mean()))))
    return out


def post_gap_nis(flight, gap: float, start: float, accel_sigma: float, rate_sigma: float) -> np.ndarray:
    """NIS of the updates after an IMU gap of ``gap`` s at ``start`` s (filter from ground truth)."""
    from scipy.spatial.transform import Rotation

    from velobins_ekf.config import EkfConfig
    from velobins_ekf.ekf import NavState
    from velobins_ekf.runner import VelocityEkf

    rots = Rotation.from_quat(flight.q).as_matrix()
    cfg = EkfConfig(gap_accel_sigma=accel_sigma, gap_rate_sigma=rate_sigma)
    f = VelocityEkf(cfg, keep_updates=True)
    rot0 = rots[0]
    f.initialize(float(flight.t[0]), NavState(rot0, flight.v[0].copy(), flight.p[0].copy(), np.zeros(3), np.zeros(3)))
    rng = np.random.default_rng(1)
    rate = 1.0 / float(np.median(np.diff(flight.t)))
    every = max(1, round(rate / VEL_RATE))
    t0, t1 = flight.t[0] + start, flight.t[0] + start + gap
    cov = np.eye(3) * NOISE**2
    for k in range(flight.t.size):
        t = float(flight.t[k])
        if t0 < t < t1:
            continue
        f.add_imu(t, flight.acc[k], flight.gyro[k])
        if k % every == 0:
            z = rots[k].T @ flight.v[k] + rng.normal(0.0, NOISE, 3)
            f.add_velocity(t, z, cov)
    ups = f.pop_updates()
    return np.array([u.nis for u in ups if u.stamp >= t1])


def main(argv: list[str] | None = None) -> int:
    from velobins_data.sim.presets import PRESETS
    from velobins_data.sim.trajectories import FAMILIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a folder of flights for part 1 (NanoBench train: the defaults' figures)")
    p.add_argument("--kind", default="nanobench", help="dataset kind of --data")
    p.add_argument("--presets", nargs="+", default=["nano", "racer"], choices=sorted(PRESETS))
    p.add_argument("--family", default="figure8", choices=FAMILIES, help="simulated trajectory family")
    p.add_argument("--gaps", type=float, nargs="+", default=[0.3, 0.5, 1.0, 1.5, 3.0])
    p.add_argument("--seconds", type=float, default=40.0)
    args = p.parse_args(argv)

    from velobins_common.health import NisMonitor
    from velobins_ekf.config import EkfConfig

    if args.data:
        from velobins_data.datasets import DatasetError, load_directory

        try:
            flights = load_directory(args.kind, args.data)
        except (DatasetError, KeyError, ValueError) as exc:  # a wrong folder, file or kind: one line, exit 2
            print(f"bench_gap_hold: --data {args.data}: {exc}", file=sys.stderr)
            return 2
        print(f"## {len(flights)} flights of {args.data}: what a gap of T seconds hides\n")
        print("| T [s] | Δv/T RMS per axis [m/s²] | rotation/T RMS [rad/s] |\n|---|---|---|")
        for span, acc, rate in data_rates(flights, (0.3, 1.0)):
            print(f"| {span:g} | {', '.join(f'{a:.2f}' for a in acc)} | {rate:.2f} |")
        print()

    from velobins_data.sim import simulate_flight

    default = EkfConfig()
    settings = {
        "initial σ": (0.0, 0.0),
        f"defaults ({default.gap_accel_sigma:g}, {default.gap_rate_sigma:g})": (
            default.gap_accel_sigma,
            default.gap_rate_sigma,
        ),
        "agile (3, 0.5)": (3.0, 0.5),
    }
    alarm = NisMonitor(WINDOW).raise_sum / WINDOW
    print(f"## The hold: NIS after a gap ({args.family}, {args.seconds:g} s, ten gaps per flight; alarm {alarm:.2f})\n")
    print("| preset | gap [s] | setting | first NIS (median) | mean of 60 after (median) | alarms |")
    print("|---|---|---|---|---|---|")
    for preset in args.presets:
        flight = simulate_flight(preset, args.family, args.seconds, 7)
        starts = np.linspace(5.0, args.seconds - max(args.gaps) - WINDOW / VEL_RATE - 1.0, 10)
        for gap in args.gaps:
            for name, (acc, rate) in settings.items():
                first, means = [], []
                for start in starts:
                    nis = post_gap_nis(flight, gap, float(start), acc, rate)
                    first.append(nis[0])
                    means.append(nis[:WINDOW].mean())
                share = float(np.mean(np.array(means) > alarm))
                print(
                    f"| {preset} | {gap:g} | {name} | {np.median(first):.1f} | {np.median(means):.2f} | {share:.0%} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
