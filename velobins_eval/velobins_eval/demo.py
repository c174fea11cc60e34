"""``velobins demo``: the README's main job, end to end on simulated flights, no downloads.

1. simulate nano-quadrotor flights with rotorpy (PWM rotors, NanoBench-like speeds);
2. split them into train / validation / held-out test flights;
3. train VeloBins (G+H^B, SPE bins) and the regression baseline (reg) with the same short CPU
   schedule, both at once (one process and one thread each);
4. convert the held-out flights to rosbag2 and replay each through the real node graph (network,
   EKF and eval nodes as separate processes over Fast DDS, sim time) once per model;
5. print the comparison table of VeloBins, regression and IMU-only integration (the same EKF
   without updates, computed offline), and write the reports and plots under ``--out``.

``--out`` (default ``runs/main_job``) is locked while the demo runs; one that holds an earlier demo
run is refused unless ``--overwrite`` replaces it (``scripts/main_job.sh`` passes it, so the main
job stays re-runnable). Files there that the demo does not write are left alone.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

from velobins_common.outputs import RunLayout, RunLock, atomic_write_text, open_run_dir, output_mode

from . import metrics, report
from .reproduce import stop_processes

LAYOUT = RunLayout(
    "demo",
    ("flights", "train", "bags", "graph", "offline", "metrics.json", "config.json", "report.md"),
    resumable=False,
)
"""Every entry ``velobins demo`` writes in ``--out`` (what ``--overwrite`` removes)."""

MODELS = (("G+H^B", ["--variant", "G+H", "--uncertainty", "B", "--encoding", "spe"]), ("reg", ["--variant", "reg"]))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="velobins demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/main_job"), help="output directory (locked while it runs)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace the demo run already in --out (scripts/main_job.sh passes it)"
    )
    p.add_argument("--flights", type=int, default=24, help="simulated flights in total")
    p.add_argument("--seconds", type=float, default=60.0, help="duration of each flight [s]")
    p.add_argument("--test-flights", type=int, default=4, help="held-out flights replayed through the graph")
    p.add_argument("--val-flights", type=int, default=3, help="validation flights (best checkpoint)")
    p.add_argument("--epochs", type=int, default=12, help="training epochs (paper: 100)")
    p.add_argument("--stride", type=int, default=10, help="training window stride [samples] (paper: 1)")
    p.add_argument("--rate", type=float, default=3.0, help="replay speed factor of the graph runs")
    p.add_argument("--seed", type=int, default=0, help="seed of simulation and training")
    p.add_argument("--skip-graph", action="store_true", help="score the held-out flights offline only")
    return p


def _run(cmd: list[str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)


def _step(title: str) -> float:
    print(f"\n\033[1m== {title}\033[0m", flush=True)
    return time.monotonic()


def open_demo_dir(out: Path, overwrite: bool) -> RunLock:
    """Lock ``out`` for the demo; refuse one holding an earlier demo run unless ``overwrite`` (then it is removed).

    Returns the held lock (a context manager). Raises :class:`OutputError` naming ``out``.
    """
    return open_run_dir(out, LAYOUT, output_mode(overwrite=overwrite))


def main_demo(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.test_flights + args.val_flights + 2 > args.flights:
        raise ValueError("--flights must leave at least 2 training flights after validation and test flights")
    with open_demo_dir(args.out, args.overwrite):  # removes its lock file on any exit, Ctrl-C included
        return _demo(args, args.out)


def _demo(args: argparse.Namespace, out: Path) -> int:
    """Steps 1-5 into the locked, empty demo entries of ``out``."""
    wall0 = time.monotonic()
    timings: dict[str, float] = {}
    velobins = [sys.executable, "-m", "velobins_eval.cli"]

    t = _step(f"1/5 simulate {args.flights} nano flights x {args.seconds:g} s (rotorpy, all cores)")
    from .sim.batch import simulate_many

    paths = simulate_many("nano", args.flights, args.seconds, args.seed, out / "flights" / "all")
    timings["simulate"] = time.monotonic() - t

    t = _step("2/5 split flights")
    split = {"test": paths[: args.test_flights], "val": paths[args.test_flights : args.test_flights + args.val_flights]}
    split["train"] = paths[args.test_flights + args.val_flights :]
    for name, files in split.items():
        (out / "flights" / name).mkdir(parents=True)
        for f in files:
            shutil.copy2(f, out / "flights" / name / f.name)
        names = ", ".join(f.stem for f in files[:4]) + (", ..." if len(files) > 4 else "")
        print(f"  {name:5s}: {len(files)} flights ({names})")
    timings["split"] = time.monotonic() - t

    t = _step(f"3/5 train G+H^B and reg: {args.epochs} epochs, stride {args.stride}, in parallel (logs in {out}/train)")
    procs = {}
    for label, extra in MODELS:
        cmd = [
            *velobins,
            "train",
            "--dataset",
            "csv",
            "--data",
            str(out / "flights" / "train"),
            "--val",
            str(out / "flights" / "val"),
            *extra,
            "--epochs",
            str(args.epochs),
            "--stride",
            str(args.stride),
            "--seed",
            str(args.seed),
            "--threads",
            "1",
            "--out",
            str(out / "train" / label),
        ]
        procs[label] = _run(cmd, out / "train" / f"{label}.log")
    try:
        codes = {label: proc.wait() for label, proc in procs.items()}
    except BaseException:  # Ctrl-C: stop the trainings we started (they remove their temporary files)
        stop_processes(procs.values())
        raise
    for label, code in codes.items():
        log = out / "train" / f"{label}.log"
        if code != 0:
            print(log.read_text()[-3000:], file=sys.stderr)
            print(f"velobins demo: error: training {label} failed (log: {log})", file=sys.stderr)
            return 1
        print("  " + log.read_text().strip().splitlines()[-1])
    timings["train"] = time.monotonic() - t
    checkpoints = {label: out / "train" / label / "best.pt" for label, _ in MODELS}

    t = _step(f"4/5 held-out flights -> rosbag2 -> node graph at {args.rate:g}x (network, EKF, eval nodes)")
    from .bag import write_bag
    from .datasets import load_sequence
    from .evaluate import fuse_flight, imu_only_flight, predict_flight
    from .scoring import GroundTruth

    seqs = [load_sequence("csv", p) for p in split["test"]]
    graph_metrics: dict[str, dict[str, dict[str, float]]] = {label: {} for label, _ in MODELS}
    offline_records: dict[str, dict] = {label: {} for label, _ in MODELS}
    from velobins_net.inference import load_checkpoint

    models = {label: load_checkpoint(path) for label, path in checkpoints.items()}
    for seq in seqs:
        bag_path = out / "bags" / seq.name
        write_bag(seq, bag_path)
        for label, _ in MODELS:
            tv, v, var = predict_flight(models[label], seq)
            offline_records[label][seq.name] = fuse_flight(seq, tv, v, var, label)
            if args.skip_graph:
                continue
            from .graph import run_graph

            run = run_graph(
                bag_path,
                checkpoints[label],
                out / "graph" / label / seq.name,
                rate=args.rate,
                label=label,
                flight=seq.name,
                timeout=60 + 3 * seq.duration / args.rate,
            )
            if not run.metrics:
                raise RuntimeError(f"graph run {label}/{seq.name} wrote no report; logs in {run.report_dir}")
            graph_metrics[label][seq.name] = run.metrics[label]["flights"][seq.name]
            stats = json.loads((run.report_dir / "config.json").read_text())["graph"]
            print(
                f"  {seq.name:18s} {label:6s} graph {run.wall_s:5.1f} s wall, {stats['estimates']} estimates, "
                f"odometry {stats['odometry_rate_hz']:.1f} Hz, ATE {graph_metrics[label][seq.name]['ate']:.3f} m"
            )
    timings["graph"] = time.monotonic() - t

    t = _step("5/5 report")
    first = offline_records[MODELS[0][0]]
    offline_records["imu-only"] = {s.name: imu_only_flight(s, first[s.name].t) for s in seqs}
    gts = {s.name: GroundTruth.of(s) for s in seqs}
    offline_table = report.write_report(offline_records, gts, out / "offline", {"source": "offline"})
    timings["report"] = time.monotonic() - t
    timings["total"] = time.monotonic() - wall0

    doc = json.loads((out / "offline" / "metrics.json").read_text())
    if not args.skip_graph:
        for label, flights in graph_metrics.items():
            per_flight = {f: metrics.FlightMetrics(**{k: _nan(v) for k, v in m.items()}) for f, m in flights.items()}
            doc[label] = {"aggregate": report.aggregate(per_flight), "flights": flights, "source": "ros graph"}
    rows = {m: {k: _nan(v) for k, v in d["aggregate"].items()} for m, d in doc.items()}
    table = report.markdown_table(rows, len(seqs))
    config = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "timings_s": timings,
        "sources": {m: d.get("source", "offline") for m, d in doc.items()},
    }
    atomic_write_text(out / "metrics.json", json.dumps(doc, indent=1))
    atomic_write_text(out / "config.json", json.dumps(config, indent=1))
    atomic_write_text(
        out / "report.md",
        "# VeloBins main job\n\n"
        f"{len(seqs)} held-out simulated flights; VeloBins and reg rows from the ROS graph "
        f"({'skipped' if args.skip_graph else f'replay at {args.rate:g}x'}), imu-only offline.\n\n"
        f"{table}\n\n## Offline (same flights, same code paths)\n\n{offline_table}\n",
    )
    print(f"\n{table}\n")
    print("timings [s]: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    print(f"report: {out / 'report.md'}, plots: {out / 'offline' / 'plots'} and {out / 'graph'}")
    return 0


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


if __name__ == "__main__":
    sys.exit(main_demo())
