"""Node graph: how fast a bag can be replayed, and IMU-in -> velocity-out latency.

Run: ``source scripts/env.sh && python benchmarks/bench_graph.py [--seconds 60] [--rates 1 2 4 8]``.

A tiny G+H^B model is trained on short simulated nano flights (seconds; the graph tests' setup,
``velobins_eval/test/graph_fixtures.py``) unless ``--checkpoint`` is given, and a held-out
flight of ``--seconds`` is replayed through the four-process graph (replay, network, EKF, eval;
:func:`velobins_eval.graph.run_graph`) at each rate. Per rate the table shows:

* ``estimates``: network estimates the eval node recorded / the offline schedule (``predict_flight``);
* ``odometry``: odometry messages the eval node recorded / IMU samples in the bag;
* ``imu rx``: /imu messages this process received / IMU samples (best effort: transport loss);
* ``drift vel``: largest relative difference graph vs offline of the velocity and uncertainty
  metrics (net AVE/NLL, AVE, NEES); ``drift pos``: the same for ATE and RTE, which carry a
  systematic offset (the eval node samples odometry before each update's own correction; see
  ``test_graph.POSITION_REL_TOL``);
* ``latency p50/p99``: wall time at which this process received the estimate stamped t minus the
  wall time it received the /imu message stamped t (both subscriptions in this process, so the
  DDS delivery to the benchmark cancels out; it includes the network node's queueing, the
  1 s window's resampling and the inference).

"Keeps up" means every node exited 0, at least 99 % of the estimates and odometry arrived and
the velocity metrics drift less than 2 %. The machine load matters: other processes compete for the same cores.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "velobins_eval" / "test"))
import graph_fixtures as gf

from velobins_eval.evaluate import fuse_flight, predict_flight
from velobins_eval.graph import run_graph
from velobins_eval.scoring import KEYS, GroundTruth, score

KEEP_UP_DELIVERY = 0.99
"""Share of estimates and odometry that must arrive for a rate to count as keeping up."""
KEEP_UP_DRIFT = 0.02
"""Largest relative drift of the velocity metrics vs offline for a rate to count as keeping up."""
POSITION_KEYS = ("ate", "rte")
LABEL = "bench"


@dataclass
class RateResult:
    """Figures of one replay rate."""

    rate: float
    wall_s: float
    estimates: int
    odometry: int
    imu_rx: int
    drift_vel: float
    drift_pos: float
    latency_ms: tuple[float, float]
    exit_ok: bool


def _rel(a: float | None, b: float) -> float:
    if a is None or not math.isfinite(a):
        return math.inf
    return abs(a - b) / max(abs(b), 1e-9)


def run_rate(setup: gf.GraphSetup, rate: float, out: Path, offline: dict[str, float]) -> RateResult:
    """Replay the flight at ``rate`` with this process listening to /imu and /velobins/velocity."""
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu

    from velobins_msgs.msg import VelocityEstimate

    domain = random.SystemRandom().randint(1, 100)
    topics = {"/imu": Imu, "/velobins/velocity": VelocityEstimate, "/velobins/odometry": Odometry}
    with gf.TopicRecorder(domain, topics, sensor_topics=("/imu",)) as rec:
        run = run_graph(
            setup.bag,
            setup.checkpoint,
            out,
            rate=rate,
            label=LABEL,
            flight="flight",
            # network + EKF + this process listen to /imu before the replay starts
            extra_params={
                "velobins_replay_node": {"wait_for_imu_subscribers": 3},
                "velobins_eval_node": {"plots": False},
            },
            timeout=90 + 2 * setup.flight.duration / rate,
            domain_id=domain,
        )
    graph = json.loads((out / "config.json").read_text())["graph"] if (out / "config.json").is_file() else {}
    got = run.metrics.get(LABEL, {}).get("flights", {}).get("flight", {})
    imu_wall = {round(a.stamp * 1e6): a.wall for a in rec.arrivals["/imu"]}
    lat = [a.wall - imu_wall[k] for a in rec.arrivals["/velobins/velocity"] if (k := round(a.stamp * 1e6)) in imu_wall]
    lat_ms = (float(np.percentile(lat, 50)) * 1e3, float(np.percentile(lat, 99)) * 1e3) if lat else (math.nan,) * 2
    return RateResult(
        rate=rate,
        wall_s=run.wall_s,
        estimates=int(graph.get("estimates", 0)),
        odometry=int(graph.get("odometry", 0)),
        imu_rx=len(rec.arrivals["/imu"]),
        drift_vel=max(_rel(got.get(k), offline[k]) for k in KEYS if k not in POSITION_KEYS),
        drift_pos=max(_rel(got.get(k), offline[k]) for k in POSITION_KEYS),
        latency_ms=lat_ms,
        exit_ok=all(rc == 0 for rc in run.return_codes.values()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="replayed flight length [s]")
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0], help="replay speed factors")
    parser.add_argument("--checkpoint", type=Path, help="model to run (default: train the tests' tiny model)")
    args = parser.parse_args()

    import torch

    from velobins_net.inference import load_checkpoint

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench_graph_") as tmp:
        root = Path(tmp)
        print(f"setup: simulating flights and training the tiny model ({args.seconds:g} s held-out flight) ...")
        setup = gf.tiny_setup(root, test_seconds=args.seconds)
        if args.checkpoint is not None:
            setup = gf.GraphSetup(checkpoint=args.checkpoint, flight=setup.flight, bag=setup.bag)
        seq = setup.flight
        t, v, var = predict_flight(load_checkpoint(setup.checkpoint), seq)
        scored = score(fuse_flight(seq, t, v, var, LABEL), GroundTruth.of(seq))
        offline = {k: float(getattr(scored, k)) for k in KEYS}
        results = []
        for rate in args.rates:
            print(f"replaying at {rate:g}x ...", flush=True)
            results.append(run_rate(setup, rate, root / f"rate_{rate:g}", offline))

    n_est, n_imu = len(t), len(seq)
    print(f"\nnode graph, {seq.duration:.0f} s flight ({n_imu} IMU samples @ {seq.rate_hz:.0f} Hz, {n_est} estimates)")
    print(
        f"{'rate':>5} {'wall [s]':>8} {'estimates':>15} {'odometry':>16} {'imu rx':>7} "
        f"{'drift vel':>9} {'drift pos':>9} {'lat p50 [ms]':>12} {'lat p99 [ms]':>12} {'keeps up':>8}"
    )
    for r in results:
        keeps = (
            r.exit_ok
            and r.estimates >= KEEP_UP_DELIVERY * n_est
            and r.odometry >= KEEP_UP_DELIVERY * n_imu
            and r.drift_vel < KEEP_UP_DRIFT
        )
        print(
            f"{r.rate:>4g}x {r.wall_s:>8.1f} {r.estimates:>6d} ({r.estimates / n_est:>5.1%}) "
            f"{r.odometry:>6d} ({r.odometry / n_imu:>6.1%}) {r.imu_rx / n_imu:>7.1%} "
            f"{r.drift_vel:>9.2%} {r.drift_pos:>9.2%} {r.latency_ms[0]:>12.1f} {r.latency_ms[1]:>12.1f} "
            f"{'yes' if keeps else 'NO':>8}"
        )
    print(
        f"\nkeeps up: exit 0, >= {KEEP_UP_DELIVERY:.0%} of estimates and odometry, velocity-metric drift "
        f"< {KEEP_UP_DRIFT:.0%}. Latency: /imu stamped t received -> /velobins/velocity stamped t received."
    )


if __name__ == "__main__":
    main()
