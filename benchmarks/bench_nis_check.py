"""The EKF node's NIS consistency check, offline: quiet on nominal flights, raised by a wrong IMU.

Run: ``source scripts/env.sh && python benchmarks/bench_nis_check.py [--model crazyflie] [--windows 20 40 100]
[--data ../shared/data/nanobench/val]``.

For each shipped demo flight (``velobins_eval/velobins_eval/demo_data/nanobench``) the shipped model and
its EKF overlay run in the loop the nodes form (the network's estimate at 20 Hz fused by the filter,
:func:`velobins_ekf.offline.run_offline`), the filter started from ground truth (so that a wrong IMU
reaches the running filter: a self-initialisation refuses it before). Three IMU streams, given to network
and filter alike: the flight's (nominal), an FRD IMU published as FLU (y and z negated) and an IMU in g
(specific force / g). Per stream and NIS window the table gives the mean NIS, the largest window mean,
the alarm threshold of the window mean, how often the test raised (raises) and the share of updates with
the test raised, the seconds from the start to the first raise, and the old check's WARN share (a full
window of 100 with less than half the NIS inside the χ²₃ 95 % interval). The running specific-force check's
verdict (velobins_ekf.integrity) is printed too.
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

STREAMS = {
    "nominal": lambda acc, gyro, g: (acc, gyro),
    "FRD as FLU": lambda acc, gyro, g: (acc * [1.0, -1.0, -1.0], gyro * [1.0, -1.0, -1.0]),
    "IMU in g": lambda acc, gyro, g: (acc / g, gyro),
}


def run(flight, model, ekf_config, stream: str) -> tuple[np.ndarray, np.ndarray, object]:
    """Stamps and NIS of the accepted velocity updates of one closed-loop run, and the filter's IMU fault."""
    import torch

    from velobins_ekf.ekf import NavState
    from velobins_ekf.offline import run_offline
    from velobins_net.inference import PredictorConfig, StreamingPredictor

    torch.set_num_threads(1)
    acc, gyro = STREAMS[stream](flight.acc, flight.gyro, ekf_config.gravity)
    predictor = StreamingPredictor(model, PredictorConfig())
    faults = []

    def on_imu(i: int, filt) -> None:
        t = float(flight.t[i])
        predictor.push_rotor(t, flight.rotor[i])
        predictor.push_imu(t, acc[i], gyro[i])
        pred = predictor.step()
        if pred is not None:
            filt.add_velocity(pred.stamp, pred.velocity, pred.covariance_matrix())
        if i == flight.t.size - 1:
            faults.append(filt.imu_fault)

    none = np.zeros((0, 3))
    res = run_offline(
        flight.t,
        acc,
        gyro,
        none[:, 0],
        none,
        np.zeros((0, 3, 3)),
        init_state=NavState.from_pose(flight.q[0], flight.v[0], flight.p[0]),
        config=ekf_config,
        on_imu=on_imu,
    )
    ups = [u for u in res.updates if u.accepted]
    return np.array([u.stamp for u in ups]), np.array([u.nis for u in ups]), faults[0]


def summarise(t: np.ndarray, nis: np.ndarray, window: int) -> dict[str, float]:
    from velobins_common.health import NisMonitor

    mon = NisMonitor(window=window)
    raised, first = [], float("nan")
    for ti, x in zip(t, nis, strict=True):
        mon.add(float(x))
        raised.append(mon.raised)
        if mon.raised and first != first:
            first = float(ti - t[0])
    means = np.convolve(nis, np.ones(window) / window, mode="valid") if nis.size >= window else np.array([np.nan])
    old = NisMonitor(window=100)
    warn = []
    for x in nis:
        old.add(float(x))
        share = old.share_inside()
        warn.append(len(old) >= 100 and share is not None and share < 0.5)
    return {
        "mean": float(nis.mean()),
        "max_window_mean": float(np.nanmax(means)),
        "threshold": mon.raise_sum / window,
        "raises": mon.raises,
        "raised_share": float(np.mean(raised)),
        "first_raise_s": first,
        "old_warn_share": float(np.mean(warn)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="crazyflie", help="shipped model name (default crazyflie)")
    parser.add_argument("--windows", type=int, nargs="+", default=[20, 40, 100], help="NIS windows [updates]")
    parser.add_argument("--data", help="NanoBench flights to run (default: the shipped demo flights)")
    args = parser.parse_args()

    from velobins_data.datasets import load_flights
    from velobins_ekf.params import load_filter_config
    from velobins_eval.demo import DEMO_DATA
    from velobins_eval.graph import config_files
    from velobins_net.inference import load_checkpoint
    from velobins_net.pretrained import resolve_model

    resolved = resolve_model(args.model)
    model = load_checkpoint(resolved.checkpoint)
    files = [config_files()[0]] + ([resolved.overlay] if resolved.overlay else [])
    ekf_config = load_filter_config(files)
    flights = list(load_flights("nanobench", args.data or DEMO_DATA).sequences)
    print(f"model {args.model}, EKF {' + '.join(p.name for p in files)}; NIS test alarm probability 1e-3 per window")
    head = "flight                   stream       win  meanNIS  maxWinMean  thresh  raises  raised%  1st[s]  oldWARN%"
    print(head)
    for flight in flights:
        for stream in STREAMS:
            t, nis, fault = run(flight, model, ekf_config, stream)
            for w in args.windows:
                s = summarise(t, nis, w)
                print(
                    f"{flight.name[:24]:24s} {stream:12s} {w:4d} {s['mean']:8.2f} {s['max_window_mean']:11.2f} "
                    f"{s['threshold']:7.2f} {s['raises']:7d} {100 * s['raised_share']:7.1f} {s['first_raise_s']:7.2f} "
                    f"{100 * s['old_warn_share']:8.1f}",
                    flush=True,
                )
            print(f"{'':24s} {stream:12s} running IMU check: {fault.cause if fault else 'plausible'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
