"""Throughput of the velocity EKF: 1 kHz IMU + 20 Hz velocity updates, one core.

Run: ``.venv/bin/python benchmarks/bench_ekf.py [--seconds 60]``. Prints a table: wall time,
IMU samples per second and the real-time factor (simulated seconds per wall second; target ≥ 50x).
Data generation is excluded from the timings. Rows:

* the streaming wrapper (``VelocityEkf``) reading the state only at the updates; the core then
  runs the functions of ``velobins_ekf.propagation`` on whole blocks of IMU intervals;
* the same, but reading state *and* covariance after every IMU sample, as the EKF node does when it
  publishes odometry at the IMU rate (``odom_rate: 0``): the same functions, one interval at a time;
* the bare core's propagation in both modes, for reference;
* ``velobins_ekf.offline.run_offline`` (offline evaluation: the pose recorded at every IMU sample).

The "read every sample" rows read the core (``.ekf``) directly, as this benchmark always has, so
that figures stay comparable across versions.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, before numpy loads BLAS

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from velobins_ekf.config import EkfConfig  # noqa: E402
from velobins_ekf.ekf import ErrorStateEkf, NavState  # noqa: E402
from velobins_ekf.offline import run_offline  # noqa: E402
from velobins_ekf.runner import VelocityEkf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "velobins_ekf" / "test"))
from ekf_oracles import AnalyticTrajectory, simulate_imu  # noqa: E402  (the tests' synthetic flights)

IMU_RATE = 1000.0
UPDATE_RATE = 20.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated flight length [s]")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions (best is reported)")
    args = parser.parse_args()

    cfg = EkfConfig()
    rng = np.random.default_rng(0)
    traj = AnalyticTrajectory()
    t = np.arange(0.0, args.seconds, 1.0 / IMU_RATE)
    tr = traj.sample(t)
    imu = simulate_imu(tr, cfg, rng)
    tm = np.arange(1.0 / UPDATE_RATE, args.seconds, 1.0 / UPDATE_RATE) + 2e-4
    z = traj.sample(tm).body_velocity + rng.standard_normal((tm.size, 3)) * 0.05
    cov = np.eye(3) * 0.05**2
    s0 = NavState(tr.rot[0].copy(), tr.vel[0].copy(), tr.pos[0].copy(), np.zeros(3), np.zeros(3))
    t_l, acc_l, gyro_l, tm_l = t.tolist(), imu.acc.tolist(), imu.gyro.tolist(), tm.tolist()

    def run_stream(read_every_sample: bool = False) -> VelocityEkf:
        f = VelocityEkf(cfg)
        f.initialize(t_l[0], s0)
        j = 0
        for i, ti in enumerate(t_l):
            while j < len(tm_l) and tm_l[j] <= ti:
                f.add_velocity(tm_l[j], z[j], cov)
                j += 1
            f.add_imu(ti, acc_l[i], gyro_l[i])
            if read_every_sample:
                _ = f.ekf.state, f.ekf.cov
        f.ekf.flush()
        return f

    def run_core(read_every_sample: bool = False) -> ErrorStateEkf:
        e = ErrorStateEkf(cfg, s0)
        dt = 1.0 / IMU_RATE
        for i in range(len(t_l) - 1):
            e.propagate(dt, acc_l[i], gyro_l[i])
            if read_every_sample:
                _ = e.state, e.cov
        e.flush()
        return e

    cov_meas = np.broadcast_to(cov, (tm.size, 3, 3))

    def run_offline_eval() -> None:
        run_offline(t, imu.acc, imu.gyro, tm, z, cov_meas, init_state=s0, config=cfg, keep_updates=False)

    def best(fn) -> tuple[float, object]:
        times, out = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return min(times), out

    wall_stream, filt = best(run_stream)
    wall_stream_each, filt_each = best(lambda: run_stream(read_every_sample=True))
    wall_core, _ = best(run_core)
    wall_core_each, _ = best(lambda: run_core(read_every_sample=True))
    wall_offline, _ = best(run_offline_eval)
    n = t.size
    err = float(np.linalg.norm(filt.state.pos - tr.pos[-1]))
    diff = float(np.linalg.norm(filt.state.pos - filt_each.state.pos))
    print(f"EKF throughput, {args.seconds:.0f} s simulated at {IMU_RATE:.0f} Hz IMU + {UPDATE_RATE:.0f} Hz updates")
    print(f"(one core, best of {args.repeats} runs)")
    rows = (
        ("VelocityEkf, IMU + updates", wall_stream),
        ("  same, state+P read every sample", wall_stream_each),
        ("ErrorStateEkf.propagate only", wall_core),
        ("  same, state+P read every sample", wall_core_each),
        ("run_offline (pose every sample)", wall_offline),
    )
    print(f"{'path':<36}{'wall [s]':>10}{'samples/s':>12}{'us/sample':>11}{'real-time x':>13}")
    for name, wall in rows:
        print(f"{name:<36}{wall:>10.3f}{n / wall:>12.0f}{wall / n * 1e6:>11.2f}{args.seconds / wall:>12.1f}x")
    print(f"updates applied: {filt.stats.meas_applied}, final position error: {err:.3f} m")
    print(f"batched vs per-sample path, final position difference: {diff:.2e} m")


if __name__ == "__main__":
    main()
